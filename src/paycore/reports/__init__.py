"""Read-only reports over the books (SPEC §11 "Loss report"): no writes, no rules of their own."""
