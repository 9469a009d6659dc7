"""A flow's ledger transfer resolved behind its back, for the tests of what paycore does with an
item it can no longer move (a worker round, a settlement report's line: `lifecycle.faults`).

Each function calls the ledger's own Python functions in one transaction, as the tenant's
transfers API once could on a payment's, refund's or payout's transfer. Since transfers have
owners, neither the ledger API nor the database lets anyone but the flow resolve its transfer:
these act as the owner (`owner_of`), as a bug in the flow's own code would. Tests break items
only through these, so that the way a hold is resolved behind its flow's back lives here alone.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger


def owner_of(connection: Connection, tenant_id: str, transfer_id: str) -> str | None:
    """The flow object that owns the transfer (the only one the ledger lets move it); None for
    the tenant's own."""
    owner = connection.execute(
        text("SELECT owner_id FROM ledger_transfers WHERE tenant_id = :t AND id = :id"),
        {"t": tenant_id, "id": transfer_id},
    ).scalar_one()
    return None if owner is None else str(owner)


def void_hold(database: Database, tenant_id: str, transfer_id: str) -> None:
    """The flow's pending transfer voided: its money back in the source's available balance."""

    def work(connection: Connection) -> None:
        owner = owner_of(connection, tenant_id, transfer_id)
        ledger.void_pending(connection, tenant_id, transfer_id, now_us=now_us(), owner_id=owner)

    database.transaction(work)


def post_hold(database: Database, tenant_id: str, transfer_id: str) -> None:
    """The flow's pending transfer posted in full, whatever the other system said."""

    def work(connection: Connection) -> None:
        owner = owner_of(connection, tenant_id, transfer_id)
        ledger.post_pending(connection, tenant_id, transfer_id, amount_minor=None, now_us=now_us(), owner_id=owner)

    database.transaction(work)


def reverse_transfer(database: Database, tenant_id: str, transfer_id: str) -> None:
    """The flow's posted transfer reversed by a new, opposite transfer."""

    def work(connection: Connection) -> None:
        owner = owner_of(connection, tenant_id, transfer_id)
        ledger.reverse_transfer(connection, tenant_id, transfer_id, now_us=now_us(), owner_id=owner, metadata={})

    database.transaction(work)
