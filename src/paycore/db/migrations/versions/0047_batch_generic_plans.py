"""PostgreSQL only: `paycore_create_batch` planned once per session, its arrays kept expanded.

Most of a batch's time in the server was its entries' INSERT (3,188 ms of an 8,000-transfer
batch, the unnest of the entry arrays 1,454 ms before its first row). The cause is the plan
cache, not the rows. PL/pgSQL plans a statement's first five executions in a session as
*custom* plans: the planner replaces each parameter by its value, so every array argument
(16,000 entry ids, 8,000 transfer ids, ...) is flattened into a constant of the plan. A flat
`text[]` has no offsets (its elements are of variable length): `p_transfer_ids[k]` walks it
from its first element, so the entries' `p_transfer_ids[p_move_transfers[e.move]]` costs
O(transfers) for each entry, O(entries x transfers) for the batch (measured by hand: 16,000
such subscripts of an 8,000-element array, 1.2-1.6 s in the first five calls of a session,
15-50 ms from the sixth on, when the generic plan is taken). A generic plan reads a parameter
as PL/pgSQL holds it, expanded (deconstructed once at the call's start): a subscript is O(1).
A pooled connection makes a few batches, mostly within its first five, and every custom plan
also copied the batch's arrays into its constants, statement by statement.

This revision is 0025's function (0019's text with 0025's account reads) with
`SET plan_cache_mode = force_generic_plan`: each statement is planned once per session and
reads the arrays expanded. None of its statements has a plan that depends on the arrays'
lengths (no join of two arrays; the account reads are one primary-key lookup per id, 0025), so
the generic plan is the custom one without the constants. The downgrade puts 0025's back.

A function body only: the release before runs on this schema unchanged and this release's code
runs on 0044 (its batches slower), so OLDEST_COMPATIBLE_REVISION stays.

Revision ID: 0047
Revises: 0044
Create Date: 2026-12-06 19:30:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0047"
down_revision = "0044"
branch_labels = None
depends_on = None

_HEADER = ") LANGUAGE plpgsql AS $$"
_HEADER_GENERIC = ") LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$"


def _batch_function(*, generic: bool) -> str:
    """`paycore_create_batch` as revision 0025 made it, or with its statements' plans generic
    (history: that file never changes, so neither does what this makes of it)."""
    path = Path(__file__).with_name("0025_plans_by_construction.py")
    spec = importlib.util.spec_from_file_location("paycore_revision_0025", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = str(module._batch_function(replaced=True))
    if generic:
        assert text.count(_HEADER) == 1, _HEADER
        text = text.replace(_HEADER, _HEADER_GENERIC)
    return text


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_batch_function(generic=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_batch_function(generic=False))
