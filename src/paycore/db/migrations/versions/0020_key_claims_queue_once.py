"""PostgreSQL only: `paycore_create_transfer` queues on its key's advisory lock before claiming it.

A duplicate request waits for the key's holder, bounded by lock_timeout (SPEC 3.1). The claim
was `INSERT ... ON CONFLICT DO NOTHING`, which waits on the holder's uncommitted row; when the
holder rolled back (its own lock wait past the bound) and another duplicate claimed the key
first, the INSERT waited again, with a fresh lock_timeout: a duplicate could wait several
bounds (four, once, in test_duplicates_queued_behind_a_full_connection_pool_are_bounded_too).
Every claim now first takes the transaction-scoped advisory lock `(KEY_QUEUE_CLASS,
hashtext(tenant || '/' || key))` (`paycore.idempotency.repository`, ADR 0004, "One wait"):
waiters on one lock are served in order and each one's lock_timeout counts from when it began
to wait, so a duplicate waits once. This revision adds that lock to the one-call function of
revision 0010 (same signature, `CREATE OR REPLACE`), the statement before its key's INSERT.

Nothing else changes: the lock only orders the waits; the key's primary key still decides who
executes, so code that claims without the lock (revision 0019's function, during a rolling
deploy) stays correct. Downgrade restores revision 0010's body. SQLite: nothing (one writer).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 16:10:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# paycore.idempotency.repository.KEY_QUEUE_CLASS, written out: a migration is history and does
# not follow the code.
_KEY_QUEUE_CLASS = 0x6B6579
_CLAIM = "    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,"
_QUEUE = f"    PERFORM pg_advisory_xact_lock({_KEY_QUEUE_CLASS}, hashtext(p_tenant_id || '/' || p_key));\n"


def _revision_0010_body() -> str:
    """Revision 0010's function (history: that file never changes)."""
    path = Path(__file__).with_name("0010_balance_limit_in_create_transfer.py")
    spec = importlib.util.spec_from_file_location("paycore_revision_0010", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module._REPLACE)


def _queued_body() -> str:
    body = _revision_0010_body()
    assert body.count(_CLAIM) == 1, "revision 0010's function claims its key once"
    return body.replace(_CLAIM, _QUEUE + _CLAIM, 1)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_queued_body())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_revision_0010_body())
