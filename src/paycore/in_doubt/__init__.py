"""The in-doubt resolver: how paycore learns the outcome of a call whose answer it never got,
and where every rule about an `in_doubt` item lives (SPEC §10; ADR 0006, 0016, 0032).

An item is `in_doubt` when paycore sent it to another system (a charge, a refund, a payout)
and has no answer it can trust: the call timed out, the connection broke, the worker died.
Nothing is guessed: the item waits, its money held, until evidence from the other system or
two people settle it.

- `resolver`: the worker round, the same for every kind of item — claim (one short
  transaction), call with no transaction open, apply the evidence (one transaction per item).
  `send_due` sends an item's one request; `resolve_due` asks about items without a final
  answer and, only when the other system has no record, sends the same request again. After
  `attempts_max` rounds without an answer an item stays `in_doubt`, unscheduled, for a person.
- Each domain's rounds on it: `payments/rounds.py`, `refunds/rounds.py`, `payouts/rounds.py`
  (the calls they make: each domain's `processor_calls.py`).
- What evidence proves (the rules): `lifecycle/evidence.py` (`Evidence`, `Decision`), applied
  by `lifecycle/machine.py` (`apply_evidence`) through each domain's `decide` in
  `payments/lifecycle.py`, `refunds/lifecycle.py` and `payouts/lifecycle.py`. The processor's
  events (`inbound/`) and the settlement report's lines (`reconciliation/chunks.py`) are
  evidence too and take the same path.
- Settled by people: `manual_resolutions/` (a proposal and a second person's confirmation,
  four eyes), from the console's in-doubt queue (`http/console/queues.py`).
- Watched: the in-doubt gauges (`lifecycle/store.py`, `in_doubt_summary`) on `/metrics` and the
  console's front page (`monitoring/`).
"""
