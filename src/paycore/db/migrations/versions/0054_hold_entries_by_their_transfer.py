"""PostgreSQL only: the server functions read a hold's entries by their transfer's index, whatever
the statistics and however small the tables were when the plan was made.

Five functions (`paycore_payments_settle`, `paycore_payments_capture_finish`,
`paycore_payments_cancel_finish`, `paycore_hold_resolve`, `paycore_payouts_cancel`) read the
hold's two entries in account order, the order every transfer locks its accounts in:

    SELECT ... FROM ledger_entries e WHERE e.tenant_id = $1 AND e.transfer_id = $2 ORDER BY e.account_id

The index `(tenant_id, account_id, account_sequence)` delivers that order, so a generic plan made
while the tables were small (every PL/pgSQL statement's plan, kept by its connection until the
table's statistics change, which without autovacuum is never) walks that index by the tenant
alone and filters on the transfer: every entry of the tenant, for every payment settled. Measured
(bench/history_bench.py, PostgreSQL, statistics as left, autovacuum off): 5.27x the CPU a payment
after 100,000 payments of one tenant against after 1,000, where ADR 0027 asks at most 1.2x; the
statement was 8-20 ms a call. ADR 0027's rule, no `ORDER BY` that an index leading with the tenant
could deliver, is kept here by planning the read alone (`OFFSET 0`: a subquery the planner does
not flatten), so that only `ix_ledger_entries_transfer` (tenant, transfer) matches it, and sorting
its two rows after. The rows, their order and every check are unchanged.

Downgrade writes the old passage back. SQLite: nothing (its statements are Python's, sorted there).

Revision ID: 0054
Revises: 0053
Create Date: 2026-12-07 06:30:00
"""

from __future__ import annotations

from paycore.db.function_passages import Passage, migrate_passages

revision = "0054"
down_revision = "0053"
branch_labels = None
depends_on = None

FUNCTIONS = (
    ("paycore_payments_settle", 24),
    ("paycore_payments_capture_finish", 21),
    ("paycore_payments_cancel_finish", 20),
    ("paycore_hold_resolve", 8),
    ("paycore_payouts_cancel", 24),
)
_OLD = """\
        SELECT e.account_id, e.direction, e.amount_minor FROM ledger_entries e
        WHERE e.tenant_id = p_tenant_id AND e.transfer_id = p_transfer_id
        ORDER BY e.account_id
"""
_NEW = """\
        SELECT h.account_id, h.direction, h.amount_minor FROM (
            SELECT e.account_id, e.direction, e.amount_minor FROM ledger_entries e
            WHERE e.tenant_id = p_tenant_id AND e.transfer_id = p_transfer_id
            OFFSET 0  -- planned alone: by the transfer's index, whatever the statistics (0054)
        ) h
        ORDER BY h.account_id
"""
PASSAGES = tuple(Passage(function, _OLD, _NEW) for function in FUNCTIONS)


def upgrade() -> None:
    migrate_passages(PASSAGES)


def downgrade() -> None:
    migrate_passages(PASSAGES, back=True)
