"""PostgreSQL only: the server functions number a published event with `INSERT ... SELECT`, the
form Citus runs on a tenant's worker (ADR 0031).

Nine functions (a payment's authorize, settle, capture and cancel phases, a refund's and a
payout's settle, and a payout's cancel, 0031's, in capitals and without the alias) wrote their
state event as

    INSERT INTO events (..., object_sequence, snapshot, created_at_us)
    VALUES (..., (SELECT coalesce(max(e.object_sequence), 0) + 1 FROM events e
                  WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payment_id), p_snapshot, p_now_us);

On Citus, delegated to the tenant's worker, that statement is refused there ("subqueries are not
supported within INSERT queries", SQLSTATE 0A000): the whole call rolled back and the reference
path (`audit.repository.add_next`, the same numbering in the accepted form) did the work again,
statement by statement from the coordinator. This revision rewrites each of them, in place, as

    INSERT INTO events (..., object_sequence, snapshot, created_at_us)
    SELECT ..., coalesce(max(e.object_sequence), 0) + 1, p_snapshot, p_now_us
    FROM events e WHERE e.tenant_id = p_tenant_id AND e.object_id = p_payment_id;

the same row (an aggregate without GROUP BY gives exactly one row; on one PostgreSQL the same
read of the same index), which Citus runs on the worker's local shard. The definitions are
read from the database (`pg_get_functiondef`) and only that statement is changed, so whatever
revision last defined a function keeps the rest of it; every function whose source holds the
old form is rewritten, and the eight named below must be among them (else the migration stops:
their source is not what this revision was written against). Signatures, placement (a
delegated function stays delegated) and results are unchanged, so OLDEST_COMPATIBLE_REVISION
does not move. Downgrade writes the old form back. SQLite: nothing (its statements are
Python's).

Revision ID: 0048
Revises: 0047
Create Date: 2026-12-06 19:40:00
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision = "0048"
down_revision = "0047"
branch_labels = None
depends_on = None

REWRITTEN = frozenset(
    {
        "paycore_payments_authorize",
        "paycore_payments_settle",
        "paycore_payments_capture_begin",
        "paycore_payments_capture_finish",
        "paycore_payments_cancel_begin",
        "paycore_payments_cancel_finish",
        "paycore_refunds_settle",
        "paycore_payouts_settle",
        "paycore_payouts_cancel",
    }
)
_NUMBER = "coalesce(max(e.object_sequence), 0) + 1"
_HEAD = r"(?P<head>object_sequence, snapshot, created_at_us\)\s*)"
_OLD = re.compile(
    _HEAD + r"VALUES \((?P<values>[^;]*?),\s*\(SELECT coalesce\(max\(e\.object_sequence\), 0\) \+ 1 FROM events e"
    r"\s+WHERE e\.tenant_id = p_tenant_id AND e\.object_id = (?P<object>p_\w+)\),\s*(?P<after>[^;()]*?)\);"
)
_NEW = re.compile(
    _HEAD + r"SELECT (?P<values>[^;]*?),\n        coalesce\(max\(e\.object_sequence\), 0\) \+ 1, (?P<after>[^;()]*?)"
    r"\n    FROM events e WHERE e\.tenant_id = p_tenant_id AND e\.object_id = (?P<object>p_\w+);"
)


# `paycore_payouts_cancel` (0031) wrote the same numbering in capitals, without the alias:
# rewritten the same way, in capitals, so that a downgrade finds it and writes its form back.
_BARE = "COALESCE(MAX(e.object_sequence), 0) + 1"
_OLD_BARE = re.compile(
    _HEAD + r"VALUES \((?P<values>[^;]*?),\s*\(SELECT COALESCE\(MAX\(object_sequence\), 0\) \+ 1 FROM events"
    r"\s+WHERE tenant_id = p_tenant_id AND object_id = (?P<object>p_\w+)\),\s*(?P<after>[^;()]*?)\);"
)
_NEW_BARE = re.compile(
    _HEAD + r"SELECT (?P<values>[^;]*?),\n        COALESCE\(MAX\(e\.object_sequence\), 0\) \+ 1, (?P<after>[^;()]*?)"
    r"\n    FROM events e WHERE e\.tenant_id = p_tenant_id AND e\.object_id = (?P<object>p_\w+);"
)


def _to_select(match: re.Match[str], number: str = _NUMBER) -> str:
    return (
        f"{match['head']}SELECT {match['values']},\n        {number}, {match['after']}"
        f"\n    FROM events e WHERE e.tenant_id = p_tenant_id AND e.object_id = {match['object']};"
    )


def _to_values(match: re.Match[str]) -> str:
    return (
        f"{match['head']}VALUES ({match['values']},\n        (SELECT {_NUMBER} FROM events e"
        f"\n         WHERE e.tenant_id = p_tenant_id AND e.object_id = {match['object']}),\n        {match['after']});"
    )


def _bare_to_select(match: re.Match[str]) -> str:
    return _to_select(match, _BARE)


def _bare_to_values(match: re.Match[str]) -> str:
    return (
        f"{match['head']}VALUES ({match['values']},\n        (SELECT COALESCE(MAX(object_sequence), 0) + 1 FROM events"
        f"\n         WHERE tenant_id = p_tenant_id AND object_id = {match['object']}),\n        {match['after']});"
    )


Rewrite = Callable[[re.Match[str]], str]


def _rewrite(forms: Sequence[tuple[re.Pattern[str], Rewrite]]) -> None:
    """Every paycore function whose source holds one of `forms`, that statement rewritten."""
    bind = op.get_bind()
    found = bind.execute(
        sa.text(
            "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p"
            " WHERE p.proname LIKE 'paycore\\_%' AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')"
        )
    ).all()
    rewritten = set()
    for name, definition in found:
        new, count = definition, 0
        for form, into in forms:
            new, counted = form.subn(into, new)
            count += counted
        if count == 0:
            continue
        assert count == 1, (name, count)  # one numbered event per function, as written
        rewritten.add(name)
        # On the driver's connection (the migration's transaction), without parameters: the
        # body's `%` (RAISE's placeholders) and `:` are not the driver's or SQLAlchemy's.
        bind.connection.driver_connection.execute(new)  # type: ignore[union-attr]
    missing = REWRITTEN - rewritten
    assert not missing, f"these functions do not hold the statement this revision rewrites: {sorted(missing)}"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rewrite([(_OLD, _to_select), (_OLD_BARE, _bare_to_select)])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rewrite([(_NEW, _to_values), (_NEW_BARE, _bare_to_values)])
