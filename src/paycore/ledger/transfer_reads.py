"""A ledger's transfers and entries as read back: a transfer with its status (a hold's resolution
found), an account's statement page by page, what transfers moved money for. Reads only, inside
the caller's transaction; `ledger.service` re-exports them as the ledger's front door."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from paycore.kit.errors import InvalidStartingAfter
from paycore.ledger import repository
from paycore.ledger.accounts import get_account
from paycore.ledger.errors import TransferNotFound
from paycore.ledger.types import RESOLUTION_STATUS, Entry, Transfer, entry_from_row


def get_transfer(connection: Connection, tenant_id: str, transfer_id: str) -> Transfer:
    row = repository.get_transfer(connection, tenant_id, transfer_id)
    if row is None:
        raise TransferNotFound("no such transfer", param="id")
    entry_rows = repository.get_entries_of(connection, tenant_id, [row.id])
    status, resolved_by, posted_minor = "posted", None, None
    if row.kind == "pending":
        resolution = repository.get_resolution(connection, tenant_id, row.id)
        status = "pending"
        if resolution is not None:
            status = RESOLUTION_STATUS[resolution.kind]
            resolved_by = resolution.id
            posted_entries = repository.get_entries_of(connection, tenant_id, [resolution.id])
            posted_minor = sum(e.amount_minor for e in posted_entries if e.direction == "debit")
    elif row.kind in ("void", "expire"):
        status = RESOLUTION_STATUS[row.kind]
    return transfer_of_rows(row, entry_rows, status, resolved_by, posted_minor)


def transfer_of_rows(
    row: Any, entry_rows: Sequence[Any], status: str, resolved_by: str | None, posted_minor: int | None
) -> Transfer:
    return Transfer(
        id=row.id,
        kind=row.kind,
        status=status,
        entries=tuple(entry_from_row(e) for e in entry_rows),
        pending_id=row.pending_id,
        reverses_id=row.reverses_id,
        batch_id=row.batch_id,
        reference_type=row.reference_type,
        reference_id=row.reference_id,
        metadata=json.loads(row.metadata),
        expires_at_us=row.expires_at_us,
        created_at_us=row.created_at_us,
        owner_id=row.owner_id,
        resolved_by=resolved_by,
        posted_minor=posted_minor,
    )


def list_entries(
    connection: Connection,
    tenant_id: str,
    account_id: str,
    *,
    limit: int,
    starting_after: str | None,
) -> tuple[list[Entry], bool]:
    """A page of the account's statement in commit order; `starting_after` is the id of the
    last entry of the previous page."""
    get_account(connection, tenant_id, account_id)  # 404 for an unknown account, not an empty page
    after_sequence = 0
    if starting_after is not None:
        found = repository.entry_sequence(connection, tenant_id, account_id, starting_after)
        if found is None:
            raise InvalidStartingAfter("starting_after is not an entry of this account", param="starting_after")
        after_sequence = found
    rows = repository.list_entries(connection, tenant_id, account_id, limit=limit + 1, after_sequence=after_sequence)
    return [entry_from_row(row) for row in rows[:limit]], len(rows) > limit


def transfer_references(
    connection: Connection, tenant_id: str, transfer_ids: Sequence[str]
) -> dict[str, tuple[str, str, str | None]]:
    """What each transfer is and moved money for, by transfer id: (kind: transfer, pending,
    post, void or expire; reference_type; reference_id)."""
    rows = repository.transfer_references(connection, tenant_id, transfer_ids)
    return {row.id: (row.kind, row.reference_type, row.reference_id) for row in rows}
