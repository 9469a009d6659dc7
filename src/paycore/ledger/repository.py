"""All of the ledger's SQL. No rules here: the service decides, the repository reads and writes.

Statements on the transfer path are built once, with bind parameters, at import: building a
SQLAlchemy expression and its cache key on every call cost more CPU than the database work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, exists, func, select, update
from sqlalchemy.orm import aliased

from paycore.db.sql import insert_or_ignore
from paycore.ledger.balances import Totals
from paycore.ledger.models import accounts, entries, transfers

_TOTAL_COLUMNS = (
    accounts.c.debits_posted_minor,
    accounts.c.credits_posted_minor,
    accounts.c.debits_pending_minor,
    accounts.c.credits_pending_minor,
)


def insert_account(connection: Connection, values: dict[str, Any]) -> bool:
    return insert_or_ignore(connection, accounts, values, ("tenant_id", "code"))


_GET_ACCOUNT = select(accounts).where(accounts.c.tenant_id == bindparam("t"), accounts.c.id == bindparam("a"))
_GET_ACCOUNT_BY_CODE = select(accounts).where(
    accounts.c.tenant_id == bindparam("t"), accounts.c.code == bindparam("code")
)
_GET_ACCOUNTS_BY_CODES = select(accounts).where(
    accounts.c.tenant_id == bindparam("t"), accounts.c.code.in_(bindparam("codes", expanding=True))
)
_GET_ACCOUNTS = select(accounts).where(
    accounts.c.tenant_id == bindparam("t"), accounts.c.id.in_(bindparam("ids", expanding=True))
)
# Each total is checked against its bound *before* the addition, in the WHERE clause: the
# addition itself would fail on PostgreSQL ("bigint out of range") and become a REAL on SQLite.
_APPLY_TOTALS = (
    update(accounts)
    .where(
        accounts.c.tenant_id == bindparam("t"),
        accounts.c.id == bindparam("a"),
        *(column <= bindparam(f"{column.name}_limit") for column in _TOTAL_COLUMNS),
    )
    .values(
        {column: column + bindparam(f"{column.name}_delta") for column in _TOTAL_COLUMNS}
        | {accounts.c.entries_count: accounts.c.entries_count + bindparam("entries_added")}
    )
    .returning(*_TOTAL_COLUMNS, accounts.c.entries_count)
)
_INSERT_TRANSFER = transfers.insert()


def get_account(connection: Connection, tenant_id: str, account_id: str) -> Row[Any] | None:
    return connection.execute(_GET_ACCOUNT, {"t": tenant_id, "a": account_id}).first()


def get_account_by_code(connection: Connection, tenant_id: str, code: str) -> Row[Any] | None:
    return connection.execute(_GET_ACCOUNT_BY_CODE, {"t": tenant_id, "code": code}).first()


def get_accounts_by_codes(connection: Connection, tenant_id: str, codes: Sequence[str]) -> dict[str, Row[Any]]:
    return {row.code: row for row in connection.execute(_GET_ACCOUNTS_BY_CODES, {"t": tenant_id, "codes": codes})}


def get_accounts(connection: Connection, tenant_id: str, account_ids: Iterable[str]) -> dict[str, Row[Any]]:
    ids = sorted(set(account_ids))
    return {row.id: row for row in connection.execute(_GET_ACCOUNTS, {"t": tenant_id, "ids": ids})}


def apply_totals(
    connection: Connection, tenant_id: str, account_id: str, delta: Totals, entries_added: int, total_max: int
) -> tuple[Totals, int] | None:
    """Add `delta` to the account's cached totals and `entries_added` to its entry count;
    return the new totals and count, or None (and change nothing) when a total would pass
    `total_max`.

    The UPDATE takes the account's row lock (PostgreSQL) inside the caller's transaction, so
    the overdraft check that follows sees totals no concurrent transfer can change before
    commit, and the entry count it returns numbers this transfer's entries in commit order.
    Callers update accounts in sorted id order, so two transfers never deadlock.
    """
    params: dict[str, Any] = {"t": tenant_id, "a": account_id, "entries_added": entries_added}
    for column, amount in zip(_TOTAL_COLUMNS, vars(delta).values(), strict=True):
        params[f"{column.name}_delta"] = amount
        params[f"{column.name}_limit"] = total_max - amount if amount > 0 else total_max
    row = connection.execute(_APPLY_TOTALS, params).first()
    return None if row is None else (Totals(*row[:4]), row[4])


def insert_transfer(connection: Connection, values: dict[str, Any]) -> None:
    connection.execute(_INSERT_TRANSFER, values)


def insert_resolution(connection: Connection, values: dict[str, Any]) -> bool:
    """Insert a post/void/expire transfer; False if the pending transfer was already resolved
    (the unique (tenant_id, pending_id) constraint decides, also between processes)."""
    return insert_or_ignore(connection, transfers, values, ("tenant_id", "pending_id"))


def insert_reversal(connection: Connection, values: dict[str, Any]) -> bool:
    return insert_or_ignore(connection, transfers, values, ("tenant_id", "reverses_id"))


_INSERT_ENTRIES = entries.insert()


def insert_entries(connection: Connection, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        connection.execute(_INSERT_ENTRIES, list(rows))


def get_transfer(connection: Connection, tenant_id: str, transfer_id: str) -> Row[Any] | None:
    query = select(transfers).where(transfers.c.tenant_id == tenant_id, transfers.c.id == transfer_id)
    return connection.execute(query).first()


def get_transfer_by_key(connection: Connection, tenant_id: str, key: str) -> Row[Any] | None:
    query = select(transfers).where(transfers.c.tenant_id == tenant_id, transfers.c.idempotency_key == key)
    return connection.execute(query).first()


def get_entries_of(connection: Connection, tenant_id: str, transfer_ids: Sequence[str]) -> list[Row[Any]]:
    query = (
        select(entries)
        .where(entries.c.tenant_id == tenant_id, entries.c.transfer_id.in_(list(transfer_ids)))
        .order_by(entries.c.id)
    )
    return list(connection.execute(query))


def get_resolution(connection: Connection, tenant_id: str, pending_id: str) -> Row[Any] | None:
    query = select(transfers).where(transfers.c.tenant_id == tenant_id, transfers.c.pending_id == pending_id)
    return connection.execute(query).first()


def get_reversal(connection: Connection, tenant_id: str, transfer_id: str) -> Row[Any] | None:
    query = select(transfers.c.id).where(transfers.c.tenant_id == tenant_id, transfers.c.reverses_id == transfer_id)
    return connection.execute(query).first()


def entry_sequence(connection: Connection, tenant_id: str, account_id: str, entry_id: str) -> int | None:
    query = select(entries.c.account_sequence).where(
        entries.c.tenant_id == tenant_id, entries.c.account_id == account_id, entries.c.id == entry_id
    )
    value = connection.execute(query).scalar_one_or_none()
    return None if value is None else int(value)


def list_entries(
    connection: Connection,
    tenant_id: str,
    account_id: str,
    *,
    limit: int,
    after_sequence: int,
) -> list[Row[Any]]:
    """The account's entries in sequence (= commit) order, after `after_sequence`."""
    query = (
        select(entries)
        .where(
            entries.c.tenant_id == tenant_id,
            entries.c.account_id == account_id,
            entries.c.account_sequence > after_sequence,
        )
        .order_by(entries.c.account_sequence)
        .limit(limit)
    )
    return list(connection.execute(query))


def due_expired_pending(connection: Connection, now_us: int, limit: int) -> list[Row[Any]]:
    resolution = aliased(transfers)
    unresolved = ~exists().where(
        and_(
            resolution.c.tenant_id == transfers.c.tenant_id,
            resolution.c.pending_id == transfers.c.id,
        )
    )
    query = (
        select(transfers.c.tenant_id, transfers.c.id)
        .where(transfers.c.kind == "pending", transfers.c.expires_at_us <= now_us, unresolved)
        .order_by(transfers.c.expires_at_us)
        .limit(limit)
    )
    return list(connection.execute(query))


def count_rows(connection: Connection) -> dict[str, int]:
    return {
        table.name: connection.execute(select(func.count()).select_from(table)).scalar_one()
        for table in (accounts, transfers, entries)
    }
