"""Money invariants checked while running: `checks.py` (what is checked, one SQL query each),
`repository.py` (all the SQL), `service.py` (a bounded run, findings recorded once)."""
