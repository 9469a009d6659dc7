"""The ledger's SQL. No rules here: the service decides, the repository reads and writes.
A batch of transfers has its own (`batch_repository.py`), and so has booking fees by key
(`fees_repository.py`).

Statements on the transfer path are built once, with bind parameters, at import: building a
SQLAlchemy expression and its cache key on every call cost more CPU than the database work.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, exists, func, or_, select

from paycore.db import driver, loop_calls
from paycore.db.engine import Database
from paycore.db.sql import insert_or_ignore
from paycore.ledger.balances import Totals
from paycore.ledger.limits import bound_before_adding
from paycore.ledger.models import accounts, entries, transfers


def insert_account(connection: Connection, values: dict[str, Any]) -> bool:
    return insert_or_ignore(connection, accounts, values, ("tenant_id", "code"))


_GET_ACCOUNT = select(accounts).where(accounts.c.tenant_id == bindparam("t"), accounts.c.id == bindparam("a"))
_GET_ACCOUNT_BY_CODE = select(accounts).where(
    accounts.c.tenant_id == bindparam("t"), accounts.c.code == bindparam("code")
)
# The transfer path's statements run on the driver (paycore.db.driver): they are most of a
# transfer's work, and SQLAlchemy's per-statement cost was larger than the database's.
_ACCOUNT_COLUMNS = tuple(column.name for column in accounts.columns)
AccountRow = namedtuple("AccountRow", _ACCOUNT_COLUMNS)  # type: ignore[misc]


# Accounts per SELECT: bounds the statement (SQLite allows 500 terms in a compound SELECT).
_ACCOUNTS_PER_STATEMENT_MAX = 64


@lru_cache(maxsize=2 * _ACCOUNTS_PER_STATEMENT_MAX)
def _get_accounts_statement(by: str, count: int) -> driver.Statement:
    """One SELECT per account, joined by UNION ALL, in one statement: each is a lookup by a
    whole unique key, which has one plan. `{by} IN (...)` let PostgreSQL's generic plan, made
    while the table was small, read every account of the tenant and filter them
    (tests/integration/db/test_key_lookup_plans.py)."""
    assert by in ("id", "code"), by
    one = f"SELECT {', '.join(_ACCOUNT_COLUMNS)} FROM ledger_accounts WHERE tenant_id = ? AND {by} = ?"
    return driver.statement(" UNION ALL ".join([one] * count))


# Each total is checked against its bound *before* the addition, in the WHERE clause: the
# addition itself would fail on PostgreSQL ("bigint out of range") and become a REAL on SQLite.
# The bound is the rule of paycore.ledger.limits (`bound_before_adding`), held to it by
# tests/integration/ledger/test_limit_copies.py.
_APPLY_TOTALS = driver.statement(
    "UPDATE ledger_accounts SET"
    " debits_posted_minor = debits_posted_minor + ?, credits_posted_minor = credits_posted_minor + ?,"
    " debits_pending_minor = debits_pending_minor + ?, credits_pending_minor = credits_pending_minor + ?,"
    " entries_count = entries_count + ?"
    " WHERE tenant_id = ? AND id = ?"
    " AND debits_posted_minor <= ? AND credits_posted_minor <= ?"
    " AND debits_pending_minor <= ? AND credits_pending_minor <= ?"
    " RETURNING debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,"
    " entries_count"
)
_TRANSFER_COLUMNS = tuple(column.name for column in transfers.columns)
_INSERT_TRANSFER = driver.statement(
    f"INSERT INTO ledger_transfers ({', '.join(_TRANSFER_COLUMNS)}) VALUES ({', '.join('?' * len(_TRANSFER_COLUMNS))})"
)
_ENTRY_COLUMNS = tuple(column.name for column in entries.columns)
# Entries per INSERT statement: bounds the statement's size (and SQLite's 32,766 variables).
_ENTRIES_PER_STATEMENT_MAX = 64


@lru_cache(maxsize=_ENTRIES_PER_STATEMENT_MAX)
def _insert_entries_statement(count: int) -> driver.Statement:
    # One multi-row INSERT: one round trip (psycopg's executemany pipelines, but its
    # pipeline enter and exit cost more than the two rows of a transfer).
    row = f"({', '.join('?' * len(_ENTRY_COLUMNS))})"
    values = ", ".join([row] * count)
    return driver.statement(f"INSERT INTO ledger_entries ({', '.join(_ENTRY_COLUMNS)}) VALUES {values}")


def get_account(connection: Connection, tenant_id: str, account_id: str) -> Row[Any] | None:
    return connection.execute(_GET_ACCOUNT, {"t": tenant_id, "a": account_id}).first()


def get_account_by_code(connection: Connection, tenant_id: str, code: str) -> Row[Any] | None:
    return connection.execute(_GET_ACCOUNT_BY_CODE, {"t": tenant_id, "code": code}).first()


def get_accounts_by_codes(connection: Connection, tenant_id: str, codes: Sequence[str]) -> dict[str, Any]:
    """The accounts found, by code (system accounts are looked up by code on every credit,
    payment and payout, so this runs on the driver too)."""
    return {row.code: row for row in _accounts_where(connection, tenant_id, "code", codes)}


def get_accounts(connection: Connection, tenant_id: str, account_ids: Iterable[str]) -> dict[str, Any]:
    """The accounts found, by id, as rows with the table's column names as attributes."""
    return {row.id: row for row in _accounts_where(connection, tenant_id, "id", account_ids)}


def _accounts_where(connection: Connection, tenant_id: str, column: str, values: Iterable[str]) -> list[Any]:
    found: list[Any] = []
    for sql, parameters in _accounts_reads(tenant_id, column, values):
        found.extend(driver.fetch(connection, sql, parameters))
    return [AccountRow._make(row) for row in found]


async def get_accounts_on_loop(database: Database, tenant_id: str, account_ids: Iterable[str]) -> list[Any]:
    """`get_accounts` from the event loop, on PostgreSQL (`db/loop_calls.py`: the loop's own
    connections, no worker thread): the accounts found, as rows of the table's columns."""
    found: list[Any] = []
    for sql, parameters in _accounts_reads(tenant_id, "id", account_ids):
        found.extend(await loop_calls.fetch(database, sql, parameters, commits=False))
    return [AccountRow._make(row) for row in found]


def _accounts_reads(tenant_id: str, column: str, values: Iterable[str]) -> Iterator[tuple[driver.Statement, list[str]]]:
    """The reads of these accounts: one statement per `_ACCOUNTS_PER_STATEMENT_MAX` of them."""
    wanted = sorted(set(values))
    for start in range(0, len(wanted), _ACCOUNTS_PER_STATEMENT_MAX):
        chunk = wanted[start : start + _ACCOUNTS_PER_STATEMENT_MAX]
        yield _get_accounts_statement(column, len(chunk)), [part for value in chunk for part in (tenant_id, value)]


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
    amounts = (
        delta.debits_posted_minor,
        delta.credits_posted_minor,
        delta.debits_pending_minor,
        delta.credits_pending_minor,
    )
    limits = tuple(bound_before_adding(amount, total_max) for amount in amounts)
    rows = driver.fetch(connection, _APPLY_TOTALS, (*amounts, entries_added, tenant_id, account_id, *limits))
    if not rows:
        return None
    row = rows[0]
    return Totals(row[0], row[1], row[2], row[3]), row[4]


def insert_transfer(connection: Connection, values: dict[str, Any]) -> None:
    driver.execute(connection, _INSERT_TRANSFER, [values[name] for name in _TRANSFER_COLUMNS])


def insert_resolution(connection: Connection, values: dict[str, Any]) -> bool:
    """Insert a post/void/expire transfer; False if the pending transfer was already resolved
    (the unique (tenant_id, pending_id) constraint decides, also between processes)."""
    return insert_or_ignore(connection, transfers, values, ("tenant_id", "pending_id"))


def insert_reversal(connection: Connection, values: dict[str, Any]) -> bool:
    return insert_or_ignore(connection, transfers, values, ("tenant_id", "reverses_id"))


def insert_entries(connection: Connection, rows: Sequence[dict[str, Any]]) -> None:
    for start in range(0, len(rows), _ENTRIES_PER_STATEMENT_MAX):
        chunk = rows[start : start + _ENTRIES_PER_STATEMENT_MAX]
        params = [row[name] for row in chunk for name in _ENTRY_COLUMNS]
        driver.execute(connection, _insert_entries_statement(len(chunk)), params)


# PostgreSQL only (migration 0009, ADR 0011): the key, the transfer, the totals, the entries and
# the response in one call, committed by it (the connection is in autocommit).
CREATE_TRANSFER_CALL = driver.binary_arrays(
    driver.statement(
        "SELECT paycore_create_transfer(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
        " ?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::text[],"
        " ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::bigint[], ?, ?::text[])"
    )
)


def create_transfer_call(connection: Connection, params: Sequence[Any]) -> list[int] | None:
    """The entries' sequence numbers, in entry order; None (nothing written) if the key exists.
    Refusals come out as DBAPIError with SQLSTATE PC001 or PC002 (see migration 0009)."""
    return transfer_sequences(driver.fetch(connection, CREATE_TRANSFER_CALL, params))


def transfer_sequences(rows: Sequence[tuple[Any, ...]]) -> list[int] | None:
    """`CREATE_TRANSFER_CALL`'s answer, its `rows` run on a thread or from the loop: the entries'
    sequence numbers, in entry order; None (nothing written) if the key exists."""
    [(sequences,)] = rows
    return None if sequences is None else [int(value) for value in sequences]


def get_transfer(connection: Connection, tenant_id: str, transfer_id: str) -> Row[Any] | None:
    query = select(transfers).where(transfers.c.tenant_id == tenant_id, transfers.c.id == transfer_id)
    return connection.execute(query).first()


def get_transfer_by_key(connection: Connection, tenant_id: str, key: str) -> Row[Any] | None:
    query = select(transfers).where(transfers.c.tenant_id == tenant_id, transfers.c.idempotency_key == key)
    return connection.execute(query).first()


# A transfer's entries are found by the (tenant_id, transfer_id) index and put in id order here,
# not by ORDER BY: ordered by id in SQL, a planner may walk the primary key (tenant_id, id) to
# skip the sort, which reads every entry of the tenant (SQLite did, without statistics).
# tests/integration/plans/ checks every plan of the money path.
_ENTRIES_OF = select(entries).where(
    entries.c.tenant_id == bindparam("t"), entries.c.transfer_id.in_(bindparam("ids", expanding=True))
)
_RESOLUTION = transfers.alias("resolution")
# Posting or voiding a hold reads it back, with whether it is resolved and its entries, in one
# statement (every payment, refund and payout that ends does): the entries' columns are
# labelled `entry_<name>`; a transfer without entries comes back as one row of NULLs for them.
# No ORDER BY, for the reason `_ENTRIES_OF` gives: the entries are put in id order here.
_ENTRY_PREFIX = "entry_"
_WITH_RESOLUTION_AND_ENTRIES = (
    select(
        transfers,
        select(_RESOLUTION.c.kind)
        .where(_RESOLUTION.c.tenant_id == transfers.c.tenant_id, _RESOLUTION.c.pending_id == transfers.c.id)
        .scalar_subquery()
        .label("resolution_kind"),
        *(column.label(_ENTRY_PREFIX + column.name) for column in entries.columns),
    )
    .select_from(
        transfers.outerjoin(
            entries, and_(entries.c.tenant_id == transfers.c.tenant_id, entries.c.transfer_id == transfers.c.id)
        )
    )
    .where(transfers.c.tenant_id == bindparam("t"), transfers.c.id == bindparam("id"))
)


def get_entries_of(connection: Connection, tenant_id: str, transfer_ids: Sequence[str]) -> list[Row[Any]]:
    """The entries of these transfers, in id order."""
    rows = connection.execute(_ENTRIES_OF, {"t": tenant_id, "ids": list(transfer_ids)})
    return sorted(rows, key=lambda row: row.id)


def get_transfer_with_resolution(
    connection: Connection, tenant_id: str, transfer_id: str
) -> tuple[Row[Any] | None, list[SimpleNamespace]]:
    """The transfer with, in `resolution_kind`, the kind of the transfer that resolved it
    (post, void, expire) if it is a resolved pending transfer, and its entries in id order:
    one statement. (None, []) when there is no such transfer."""
    rows = list(connection.execute(_WITH_RESOLUTION_AND_ENTRIES, {"t": tenant_id, "id": transfer_id}))
    if not rows:
        return None, []
    cut = len(_ENTRY_PREFIX)
    found = [
        SimpleNamespace(**{name[cut:]: value for name, value in row._mapping.items() if name.startswith(_ENTRY_PREFIX)})
        for row in rows
    ]
    return rows[0], sorted((entry for entry in found if entry.id is not None), key=lambda entry: entry.id)


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


def list_accounts(
    connection: Connection,
    tenant_id: str | None,
    *,
    code_prefix: str | None,
    after: tuple[str, str] | None,
    limit: int,
) -> list[Row[Any]]:
    """Accounts of one tenant or every one, in (tenant_id, id) order (the primary key), after
    the cursor `after` = (tenant_id, id); `code_prefix`: codes starting with it, compared as
    text on both databases (not LIKE, which SQLite folds to one case)."""
    query = select(accounts)
    if tenant_id is not None:
        query = query.where(accounts.c.tenant_id == tenant_id)
    if code_prefix is not None:
        query = query.where(func.substr(accounts.c.code, 1, len(code_prefix)) == code_prefix)
    if after is not None:
        after_tenant, after_id = after
        query = query.where(
            or_(
                accounts.c.tenant_id > after_tenant,
                and_(accounts.c.tenant_id == after_tenant, accounts.c.id > after_id),
            )
        )
    return list(connection.execute(query.order_by(accounts.c.tenant_id, accounts.c.id).limit(limit)))


def find_account_of_any(connection: Connection, account_id: str) -> Row[Any] | None:
    """The account with this id, whichever its tenant (ids are random: at most one)."""
    return connection.execute(select(accounts).where(accounts.c.id == account_id).limit(1)).first()


def transfer_references(connection: Connection, tenant_id: str, transfer_ids: Sequence[str]) -> list[Row[Any]]:
    """(id, kind, reference_type, reference_id) of these transfers of the tenant."""
    if not transfer_ids:
        return []
    query = select(transfers.c.id, transfers.c.kind, transfers.c.reference_type, transfers.c.reference_id).where(
        transfers.c.tenant_id == tenant_id, transfers.c.id.in_(sorted(set(transfer_ids)))
    )
    return list(connection.execute(query))


def due_expired_pending(connection: Connection, now_us: int, limit: int) -> list[Row[Any]]:
    """The tenants' own holds past their expiry and not resolved (a flow's hold, owned, is its
    flow's to resolve), oldest expiry first."""
    unresolved = ~exists().where(
        and_(
            _RESOLUTION.c.tenant_id == transfers.c.tenant_id,
            _RESOLUTION.c.pending_id == transfers.c.id,
        )
    )
    query = (
        select(transfers.c.tenant_id, transfers.c.id)
        .where(
            transfers.c.kind == "pending",
            transfers.c.expires_at_us <= now_us,
            transfers.c.owner_id.is_(None),
            unresolved,
        )
        .order_by(transfers.c.expires_at_us)
        .limit(limit)
    )
    return list(connection.execute(query))


def oldest_expiry_due_us(connection: Connection, now_us: int) -> int | None:
    """When the oldest pending transfer past its expiry (and not resolved) expired."""
    rows = due_expired_pending(connection, now_us, 1)
    if not rows:
        return None
    query = select(transfers.c.expires_at_us).where(
        transfers.c.tenant_id == rows[0].tenant_id, transfers.c.id == rows[0].id
    )
    expired: int = connection.execute(query).scalar_one()
    return expired


def count_rows(connection: Connection) -> dict[str, int]:
    return {
        table.name: connection.execute(select(func.count()).select_from(table)).scalar_one()
        for table in (accounts, transfers, entries)
    }
