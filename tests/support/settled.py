"""What a settled payment wrote, read the same way by every race test: its ledger transfers'
kinds, its entries, and its recorded state changes. Each race test asserts on these facts for
its own ending (who settled it, how many changes), so "posted once" means the same everywhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from paycore.db.engine import Database


@dataclass(frozen=True)
class Settled:
    transfer_kinds: list[str]  # the payment's ledger transfers, by kind, sorted
    entries: int  # ledger entries of those transfers
    changes: list[tuple[str, str, int]]  # (to_state, cause, object_sequence), in order


def settled_facts(database: Database, tenant_id: str, payment_id: str) -> Settled:
    with database.read() as connection:
        return read_settled(connection, tenant_id, payment_id)


def read_settled(connection: Any, tenant_id: str, payment_id: str) -> Settled:
    keys = {"t": tenant_id, "p": payment_id}
    kinds = connection.execute(
        text("SELECT kind FROM ledger_transfers WHERE tenant_id = :t AND owner_id = :p ORDER BY kind"), keys
    ).scalars()
    entries = connection.execute(
        text(
            "SELECT count(*) FROM ledger_entries e JOIN ledger_transfers t ON t.tenant_id = e.tenant_id"
            " AND t.id = e.transfer_id WHERE t.tenant_id = :t AND t.owner_id = :p"
        ),
        keys,
    ).scalar_one()
    changes = connection.execute(
        text(
            "SELECT to_state, cause, object_sequence FROM events WHERE tenant_id = :t AND object_id = :p"
            " AND kind = 'state_change' ORDER BY object_sequence"
        ),
        keys,
    ).all()
    return Settled(list(kinds), int(entries), [(str(row[0]), str(row[1]), int(row[2])) for row in changes])
