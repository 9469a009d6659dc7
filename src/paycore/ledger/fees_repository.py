"""The SQL of booking fees by key (`paycore.ledger.fees`): transfers that carry an idempotency
key inserted many at a time, skipping the keys a tenant has, and the debits of the transfers
carrying given keys. No rules here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection

from paycore.db import driver
from paycore.ledger.models import transfers

_TRANSFER_COLUMNS = tuple(column.name for column in transfers.columns)
# Keyed transfers per INSERT statement: bounds its size (6,000 values; SQLite allows 32,766).
_KEYED_TRANSFERS_PER_STATEMENT_MAX = 500


@lru_cache(maxsize=64)
def _insert_keyed_transfers_statement(count: int) -> driver.Statement:
    """A multi-row insert that skips the rows whose key the tenant already has, and returns
    the keys it inserted. The conflict target names the partial index's predicate, as both
    databases require to pick a partial unique index (paycore.db.sql.insert_or_ignore)."""
    row = f"({', '.join('?' * len(_TRANSFER_COLUMNS))})"
    return driver.statement(
        f"INSERT INTO ledger_transfers ({', '.join(_TRANSFER_COLUMNS)}) VALUES {', '.join([row] * count)}"
        " ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
        " RETURNING idempotency_key"
    )


def insert_keyed_transfers(connection: Connection, rows: Sequence[dict[str, Any]]) -> set[str]:
    """Insert transfers that carry keys (distinct ones); return the keys inserted. A row whose
    key the tenant already has is skipped, writing nothing: the unique (tenant_id,
    idempotency_key) index decides, also between processes. On PostgreSQL a key another
    transaction holds uncommitted makes this wait for that transaction's outcome."""
    assert len({(row["tenant_id"], row["idempotency_key"]) for row in rows}) == len(rows), "keys repeat"
    assert all(row["idempotency_key"] is not None for row in rows)
    inserted: set[str] = set()
    for start in range(0, len(rows), _KEYED_TRANSFERS_PER_STATEMENT_MAX):
        chunk = rows[start : start + _KEYED_TRANSFERS_PER_STATEMENT_MAX]
        params = [row[name] for row in chunk for name in _TRANSFER_COLUMNS]
        statement = _insert_keyed_transfers_statement(len(chunk))
        inserted.update(str(found[0]) for found in driver.fetch(connection, statement, params))
    return inserted


# The debit entries on a given system account (by code prefix, e.g. `processor.fees.`) of the
# transfers carrying any of a list of keys: one statement for a whole list, found through the
# key's own unique index (tenant_id, idempotency_key). The list is one parameter (an array on
# PostgreSQL, a JSON array on SQLite), so the statement's text, and its plan, is the same for
# any number of keys. tests/integration/ledger/test_processor_fees.py checks both plans:
# - PostgreSQL may use the partial index once the WHERE implies its predicate; the WHERE
#   states it, for the generic plan of a prepared statement.
# - SQLite, with no statistics, read every entry of the tenant and looked each one's transfer
#   up: CROSS JOIN keeps the transfers (found by key) the outer loop. Given the predicate as a
#   term it searched the index by `idempotency_key > NULL`, every keyed transfer of the
#   tenant: `IN` alone implies it (a comparison of the column) and is searched by.
_KEYED_DEBITS = """
SELECT t.idempotency_key, e.amount_minor
FROM ledger_transfers t
{join} ledger_entries e ON e.tenant_id = t.tenant_id AND e.transfer_id = t.id AND e.direction = 'debit'
JOIN ledger_accounts a ON a.tenant_id = e.tenant_id AND a.id = e.account_id
WHERE t.tenant_id = ? AND {keys} AND a.code = ? || a.currency
"""
KEYED_DEBITS = driver.Statement(
    sqlite=driver.statement(
        _KEYED_DEBITS.format(join="CROSS JOIN", keys="t.idempotency_key IN (SELECT value FROM json_each(?))")
    ).sqlite,
    postgresql=driver.statement(
        _KEYED_DEBITS.format(join="JOIN", keys="t.idempotency_key IS NOT NULL AND t.idempotency_key = ANY(?)")
    ).postgresql,
)


def keyed_debits(
    connection: Connection, tenant_id: str, keys: Sequence[str], code_prefix: str
) -> list[tuple[str, int]]:
    """(key, amount) of each debit entry on an account whose code is `code_prefix` + its
    currency, in the transfers of the tenant carrying one of `keys`."""
    listed: Any = list(keys) if connection.dialect.name == "postgresql" else json.dumps(list(keys))
    rows = driver.fetch(connection, KEYED_DEBITS, (tenant_id, listed, code_prefix))
    return [(str(key), amount) for key, amount in rows]
