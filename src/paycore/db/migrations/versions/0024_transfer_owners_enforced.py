"""Who may move a transfer (contract): the database refuses what the ledger's code refuses.

Revision 0021 added `ledger_transfers.owner_id` and `ledger_accounts.system` and filled them.
This revision (after 0022 and 0023, which the release before can also run at) first fills
them again (the same idempotent statements: rows that processes of
the previous release wrote during a rolling deploy, after 0021), then creates, on both
databases:

- `ledger_transfers_owner`: a post, void, expiry or reversal must have the owner of the
  transfer it resolves or reverses (both NULL for a tenant's own). So a tenant's request can
  never resolve a payment's hold or reverse a payout's post, whatever path wrote it.
  PostgreSQL raises SQLSTATE PC005.
- `ledger_entries_system_account`: an entry on a system account needs a transfer that has an
  owner, so no tenant transfer moves `processor.clearing.USD` or `bank.cash.EUR`, including
  through the ledger API's one-call functions (`paycore_create_transfer`, `paycore_create_batch`).
  PostgreSQL raises SQLSTATE PC004.

Python refuses both before writing (`paycore.ledger`: ManagedTransfer 409, SystemAccount 403);
these triggers are the same rules where every writer must pass. They cost one primary-key read
per resolution or reversal, and one or two per entry.

Run it once every process runs the release of 0021: a process of the release before would have
its payments refused here (its transfers carry no owner). Downgrade drops the triggers.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 02:10:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_POSTGRES_OWNER = """
CREATE FUNCTION paycore_check_transfer_owner() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    target_id text := COALESCE(NEW.pending_id, NEW.reverses_id);
    target_owner text;
BEGIN
    SELECT owner_id INTO target_owner FROM ledger_transfers WHERE tenant_id = NEW.tenant_id AND id = target_id;
    IF FOUND AND target_owner IS DISTINCT FROM NEW.owner_id THEN
        RAISE EXCEPTION 'transfer % belongs to %: only its owner resolves or reverses it', target_id,
            COALESCE(target_owner, 'the tenant') USING ERRCODE = 'PC005', DETAIL = COALESCE(target_owner, '');
    END IF;
    RETURN NEW;
END $$
"""
_POSTGRES_SYSTEM = """
CREATE FUNCTION paycore_check_system_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM ledger_accounts WHERE tenant_id = NEW.tenant_id AND id = NEW.account_id AND system)
        AND NOT EXISTS (SELECT 1 FROM ledger_transfers WHERE tenant_id = NEW.tenant_id AND id = NEW.transfer_id
            AND owner_id IS NOT NULL) THEN
        RAISE EXCEPTION 'account % is a system account: only a transfer a flow owns moves it', NEW.account_id
            USING ERRCODE = 'PC004', DETAIL = NEW.account_id;
    END IF;
    RETURN NEW;
END $$
"""
_SQLITE_OWNER = """
CREATE TRIGGER ledger_transfers_owner BEFORE INSERT ON ledger_transfers
WHEN NEW.pending_id IS NOT NULL OR NEW.reverses_id IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'managed_transfer: only its owner resolves or reverses a transfer')
    WHERE EXISTS (SELECT 1 FROM ledger_transfers WHERE tenant_id = NEW.tenant_id
        AND id = COALESCE(NEW.pending_id, NEW.reverses_id) AND owner_id IS NOT NEW.owner_id);
END
"""
_SQLITE_SYSTEM = """
CREATE TRIGGER ledger_entries_system_account BEFORE INSERT ON ledger_entries
WHEN (SELECT system FROM ledger_accounts WHERE tenant_id = NEW.tenant_id AND id = NEW.account_id)
    AND (SELECT owner_id FROM ledger_transfers WHERE tenant_id = NEW.tenant_id AND id = NEW.transfer_id) IS NULL
BEGIN
    SELECT RAISE(ABORT, 'system_account: only a transfer a flow owns moves a system account');
END
"""


def _revision_0021() -> ModuleType:
    """Revision 0021's module, for its backfill (history: that file never changes)."""
    path = Path(__file__).with_name("0021_transfer_owners.py")
    spec = importlib.util.spec_from_file_location("paycore_revision_0021", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    _revision_0021().backfill()
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_POSTGRES_OWNER)
        op.execute(_POSTGRES_SYSTEM)
        op.execute(
            "CREATE TRIGGER ledger_transfers_owner BEFORE INSERT ON ledger_transfers FOR EACH ROW"
            " WHEN (NEW.pending_id IS NOT NULL OR NEW.reverses_id IS NOT NULL)"
            " EXECUTE FUNCTION paycore_check_transfer_owner()"
        )
        op.execute(
            "CREATE TRIGGER ledger_entries_system_account BEFORE INSERT ON ledger_entries FOR EACH ROW"
            " EXECUTE FUNCTION paycore_check_system_entry()"
        )
        return
    op.execute(_SQLITE_OWNER)
    op.execute(_SQLITE_SYSTEM)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER ledger_entries_system_account ON ledger_entries")
        op.execute("DROP TRIGGER ledger_transfers_owner ON ledger_transfers")
        op.execute("DROP FUNCTION paycore_check_system_entry()")
        op.execute("DROP FUNCTION paycore_check_transfer_owner()")
        return
    op.execute("DROP TRIGGER ledger_entries_system_account")
    op.execute("DROP TRIGGER ledger_transfers_owner")
