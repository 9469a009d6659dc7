"""The one lifecycle of everything paycore sends to another system and then waits on (SPEC
§6-§11): a payment at the processor, a refund, a payout at the bank — and, built on the same
pieces, a settlement report's lines (evidence), a webhook delivery (a work item), a
reconciliation day's run and break, and the processor's events matched again (ADR 0020).

- `transition`: the one status change of any table: the transition table, a compare-and-set
  on the stored status, the change's record in the same transaction. The only code that
  changes a status.
- `machine`: an object's transition table as data (`Machine`), `move` (the status change with
  the domain's ledger effect and the audit event as its record), and `apply_evidence`, which
  turns evidence into moves through the table.
- `recording`: what is written beside a status change: an item's birth (`create`), each
  change's audit event (`record`, published when the machine renders a snapshot), and a
  person asking the other system again (`ask_again`).
- `lease`: a worker's lease on any row (take, renew, release; claim with FOR UPDATE SKIP
  LOCKED on PostgreSQL).
- `evidence`: what a call, a webhook or a report established (`Evidence`), and what a domain
  decided it proves (`Decision`).
- `store`: the SQL every work table shares (compare-and-set, lease claims with FOR UPDATE
  SKIP LOCKED on PostgreSQL, the in-doubt gauges).
- `per_tenant`: how every worker round takes due rows: the tenants with due work first (a
  plain read), then each tenant's share with an equality on `tenant_id` (what Citus needs to
  lock rows), FOR UPDATE SKIP LOCKED on PostgreSQL.
- `calls`: one timed call to another system, classified, and its recorded attempt.
- `policy`: one backoff with jitter (`delay_ms`) and one give-up rule (`retry_at_us`).
- `faults`: a bad item isolated: a round (or a report's chunk) that cannot move one item leaves
  it as it was, records why (`models`: `work_faults`, counted by /metrics) and goes on.

A domain supplies its table, its `Machine` (transition table, ledger effects, columns a state
sets), its evidence mapping (`decide`, `matches`) and its request builder; nothing else. The
worker round that drives these pieces (claim due items, call with no transaction open, apply)
is the in-doubt resolver, `paycore.in_doubt.resolver`.
"""
