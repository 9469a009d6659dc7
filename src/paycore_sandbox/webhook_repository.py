"""The webhook outbox's SQL: small named statements, no rules.

An event is queued with every charge, refund and payout step, and the deliverer leases and
records them in batches, so these statements run on the database driver (paycore.db.driver),
written once: through SQLAlchemy, building and running them cost more CPU than the database's
own work. Lists of delivery ids go as one parameter (a JSON array on SQLite, an array on
PostgreSQL), so each statement has one text whatever the batch's size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection

from paycore.db import driver
from paycore_sandbox.models import webhook_attempts, webhooks

_WEBHOOK_COLUMNS: Final = tuple(column.name for column in webhooks.columns)
_ATTEMPT_COLUMNS: Final = tuple(column.name for column in webhook_attempts.columns)
# Rows per INSERT of attempts: bounds the statement (and SQLite's variables).
_ATTEMPTS_PER_STATEMENT_MAX: Final = 64
# A delivery is queued once, or twice when duplicated (duplicate_webhook).
_COPIES_MAX: Final = 2


def _rows_statement(table: str, columns: tuple[str, ...], count: int) -> driver.Statement:
    row = f"({', '.join('?' * len(columns))})"
    return driver.statement(f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * count)}")


def _in_list(sql: str) -> driver.Statement:
    """`sql` whose `{in_ids}` takes one parameter, a list of ids: a JSON array on SQLite, an
    array on PostgreSQL (`_listed`)."""
    return driver.Statement(
        sqlite=driver.statement(sql.format(in_ids="IN (SELECT value FROM json_each(?))")).sqlite,
        postgresql=driver.statement(sql.format(in_ids="= ANY(?)")).postgresql,
    )


def _listed(connection: Connection, ids: Sequence[str]) -> Any:
    return list(ids) if connection.dialect.name == "postgresql" else json.dumps(list(ids))


# --- queuing -------------------------------------------------------------------------------


@lru_cache(maxsize=_COPIES_MAX)
def _insert_webhooks_statement(count: int) -> driver.Statement:
    return _rows_statement(webhooks.name, _WEBHOOK_COLUMNS, count)


def insert_webhooks(connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """The deliveries of one event, in one statement."""
    assert 1 <= len(rows) <= _COPIES_MAX
    params = [row[name] for row in rows for name in _WEBHOOK_COLUMNS]
    driver.execute(connection, _insert_webhooks_statement(len(rows)), params)


_RELEASE_HELD = driver.statement(
    f"UPDATE {webhooks.name} SET held = ?, due_at_us = ? WHERE object_type = ? AND object_request_id = ? AND held = ?"
)


def release_held(connection: Connection, object_type: str, object_request_id: str, due_at_us: int) -> int:
    return driver.execute(connection, _RELEASE_HELD, (False, due_at_us, object_type, object_request_id, True))


# --- delivering ----------------------------------------------------------------------------


class Due(NamedTuple):
    delivery_id: str
    event_id: str
    object_type: str
    object_request_id: str
    body: str
    attempts: int


_DUE_FROM = (
    f" FROM {webhooks.name} WHERE state = 'pending' AND held = ? AND due_at_us <= ?"
    " ORDER BY due_at_us, delivery_id LIMIT ?"
)
_DUE = f"SELECT {', '.join(Due._fields)}{_DUE_FROM}"
_CLAIM_DUE = driver.statement(_DUE)
_LEASE = _in_list(f"UPDATE {webhooks.name} SET due_at_us = ? WHERE delivery_id {{in_ids}}")
# PostgreSQL: the read and the lease in one statement (one round trip fewer a round); two
# deliverers (two sandbox processes on one database) take different rows (SKIP LOCKED). The
# rows come back with the due time they had, in no set order: `claim_due` sorts them.
_CLAIM_AND_LEASE = driver.statement(
    f"WITH due AS (SELECT {', '.join(Due._fields)}, due_at_us{_DUE_FROM} FOR UPDATE SKIP LOCKED)"
    f" UPDATE {webhooks.name} AS w SET due_at_us = ? FROM due WHERE w.delivery_id = due.delivery_id"
    f" RETURNING {', '.join(f'due.{name}' for name in Due._fields)}, due.due_at_us"
)  # its SQLite text is never run: SQLite has no FOR UPDATE


def claim_due(connection: Connection, now_us: int, leased_until_us: int, limit: int) -> list[Due]:
    """The deliveries due now, oldest first, pushed to `leased_until_us` so that another
    deliverer does not send them while this one does (if this one dies, they come due again)."""
    if connection.dialect.name == "postgresql":
        found = driver.fetch(connection, _CLAIM_AND_LEASE, (False, now_us, limit, leased_until_us))
        found.sort(key=lambda row: (row[-1], row[0]))  # due_at_us, delivery_id: as _DUE orders them
        return [Due._make(row[:-1]) for row in found]
    rows = [Due._make(row) for row in driver.fetch(connection, _CLAIM_DUE, (False, now_us, limit))]
    if rows:
        ids = [row.delivery_id for row in rows]
        driver.execute(connection, _LEASE, (leased_until_us, _listed(connection, ids)))
    return rows


@lru_cache(maxsize=_ATTEMPTS_PER_STATEMENT_MAX)
def _insert_attempts_statement(count: int) -> driver.Statement:
    return _rows_statement(webhook_attempts.name, _ATTEMPT_COLUMNS, count)


def insert_attempts(connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    for start in range(0, len(rows), _ATTEMPTS_PER_STATEMENT_MAX):
        chunk = rows[start : start + _ATTEMPTS_PER_STATEMENT_MAX]
        params = [row[name] for row in chunk for name in _ATTEMPT_COLUMNS]
        driver.execute(connection, _insert_attempts_statement(len(chunk)), params)


_DELIVERED = _in_list(
    f"UPDATE {webhooks.name} SET state = 'delivered', attempts = ?, delivered_at_us = ?"
    " WHERE state = 'pending' AND delivery_id {in_ids}"
)
_RETRY = driver.statement(
    f"UPDATE {webhooks.name} SET attempts = ?, due_at_us = ? WHERE delivery_id = ? AND state = 'pending'"
)
_DEAD = driver.statement(
    f"UPDATE {webhooks.name} SET state = 'dead', attempts = ? WHERE delivery_id = ? AND state = 'pending'"
)


def mark_delivered(connection: Connection, delivery_ids: Sequence[str], attempts: int, now_us: int) -> None:
    """Deliveries answered 2xx at their attempt number `attempts`."""
    driver.execute(connection, _DELIVERED, (attempts, now_us, _listed(connection, delivery_ids)))


def mark_retry(connection: Connection, delivery_id: str, attempts: int, due_at_us: int) -> None:
    driver.execute(connection, _RETRY, (attempts, due_at_us, delivery_id))


def mark_dead(connection: Connection, delivery_id: str, attempts: int) -> None:
    driver.execute(connection, _DEAD, (attempts, delivery_id))
