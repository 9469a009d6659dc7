"""PostgreSQL only: `paycore_create_batch`'s entries get their transfer and account by a join.

Most of a batch's time in the server was its entries' INSERT (3,188 ms of an 8,000-transfer
batch, the unnest of the entry arrays 1,454 ms before its first row). The cause is how the
statement read each entry's transfer id. PL/pgSQL plans a statement's first five runs in a
session as *custom* plans: the planner replaces each parameter by its value, so every array
argument (16,000 entry ids, 8,000 transfer ids, ...) is a constant of the plan, flat. A flat
`text[]` has no offsets (its elements are of variable length): `p_transfer_ids[k]` walks it from
its first element, so the entries' `p_transfer_ids[p_move_transfers[e.move]]` cost O(transfers)
for each entry, O(entries x transfers) for the batch (measured by hand: 16,000 such subscripts
of an 8,000-element array, 1.2-1.6 s in each of a session's first five calls, 15-50 ms from the
sixth, when the generic plan reads the array expanded). A pooled connection makes a few batches,
mostly within its first five; and on Citus, where the call runs on the coordinator inside the
key's transaction, every plan must be custom (a generic one cannot be distributed), so the
function cannot simply ask for generic plans.

This revision is 0025's function (0019's text with 0025's account reads) with the entries'
INSERT reading the transfer ids, and the accounts' ids and currencies (as many as the batch has
accounts), as rows of `unnest(...) WITH ORDINALITY` joined by position: linear whatever the plan
(measured by hand: 17-81 ms in each of nine calls of a session, custom and generic). The
integer subscripts left (`p_move_transfers[e.move]`) are O(1): an array of fixed-length elements
has its offsets. The entries are inserted in the batch's order, as before. The downgrade puts
0025's back.

A function body only: the release before runs on this schema unchanged and this release's code
runs on 0044 (its batches slower), so OLDEST_COMPATIBLE_REVISION stays.

Revision ID: 0047
Revises: 0046
Create Date: 2026-12-06 19:30:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0047"
down_revision = "0046"
branch_labels = None
depends_on = None

_ENTRIES_SUBSCRIPTED = """
    SELECT p_tenant_id, e.id, p_transfer_ids[p_move_transfers[e.move]], p_account_ids[p_move_accounts[e.move]],
        e.direction, e.amount_minor, currencies[p_move_accounts[e.move]], e.sequence, p_now_us
    FROM unnest(p_entry_ids, p_entry_moves, p_entry_directions, p_entry_amounts, sequences)
        AS e(id, move, direction, amount_minor, sequence);"""
_ENTRIES_JOINED = """
    SELECT p_tenant_id, e.id, t.id, a.id, e.direction, e.amount_minor, a.currency, e.sequence, p_now_us
    FROM unnest(p_entry_ids, p_entry_moves, p_entry_directions, p_entry_amounts, sequences)
        WITH ORDINALITY AS e(id, move, direction, amount_minor, sequence, n)
    JOIN unnest(p_transfer_ids) WITH ORDINALITY AS t(id, position) ON t.position = p_move_transfers[e.move]
    JOIN unnest(p_account_ids, currencies) WITH ORDINALITY AS a(id, currency, position)
        ON a.position = p_move_accounts[e.move]
    ORDER BY e.n;"""


def _batch_function(*, joined: bool) -> str:
    """`paycore_create_batch` as revision 0025 made it, or with its entries' transfer and account
    joined by position (history: that file never changes, so neither does what this makes of it)."""
    path = Path(__file__).with_name("0025_plans_by_construction.py")
    spec = importlib.util.spec_from_file_location("paycore_revision_0025", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = str(module._batch_function(replaced=True))
    if joined:
        assert text.count(_ENTRIES_SUBSCRIPTED) == 1, _ENTRIES_SUBSCRIPTED
        text = text.replace(_ENTRIES_SUBSCRIPTED, _ENTRIES_JOINED)
    return text


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_batch_function(joined=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_batch_function(joined=False))
