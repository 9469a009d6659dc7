"""Statements of the money path, run on the database driver's own connection.

Through SQLAlchemy Core a statement costs about 0.1 ms of CPU on top of the driver on this
project's machines (execution context, parameter processing, result wrapping, events), and
a transfer runs seven of them; on PostgreSQL that was most of a transfer's client time
(docs/benchmarks.md). The statements here are plain SQL, written once with `?` placeholders
(rewritten to psycopg's `%s`), and executed on the *same* connection, in the *same*
transaction, as the caller's `Connection`: nothing about atomicity changes, only the cost.

Driver errors are re-raised as SQLAlchemy's `DBAPIError` subclasses (IntegrityError,
OperationalError, ...), so `Database.transaction` retries deadlocks and bounds lock waits
exactly as it does for statements run through SQLAlchemy. A lost connection is handled as
SQLAlchemy handles one: the connection is invalidated (never handed out again) and so is every
connection the pool made before it, since a server that dropped one dropped them all
(`db/lost_connections.py`).

Rows come back as plain tuples in the order of the statement's columns; booleans come back
as 0/1 from SQLite, so callers convert them. SQLAlchemy's events never see these statements:
the observers of `db/observers.py` do (the statement counts and plan checks of the tests), with
Core's; with none, it costs one check. Only public APIs of SQLAlchemy are used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect
from sqlalchemy.exc import DBAPIError

from paycore.db import lost_connections, observers

Params = Sequence[Any]


@dataclass(frozen=True)
class Statement:
    sqlite: str
    postgresql: str


def statement(text: str) -> Statement:
    """One statement for both drivers, from SQL written with `?` placeholders."""
    assert "%" not in text, "a literal % would need escaping for psycopg"
    return Statement(sqlite=text, postgresql=text.replace("?", "%s"))


def insert(table: str, columns: Sequence[str], rows: int = 1) -> Statement:
    """`INSERT INTO table (columns) VALUES (?, ...)`, `rows` rows of them: a data-plane phase's
    fixed insert, its parameters in `columns`' order."""
    values = ", ".join([f"({', '.join('?' * len(columns))})"] * rows)
    return statement(f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}")


def binary_arrays(sql: Statement) -> Statement:
    """The statement with its array parameters (`?::type[]`) sent in PostgreSQL's binary format
    (psycopg's `%b`): the text format escaped every element with a regular expression (three
    `re.sub` of JSON text per transfer, 0.20 ms: docs/benchmarks.md), the binary one is
    length-prefixed and needs none; about half the encoding time in all (0.55 against 1.02 ms
    for a transfer's 14 arrays, measured together on a loaded machine)."""
    return Statement(sqlite=sql.sqlite, postgresql=re.sub(r"%s(::\w+\[\])", r"%b\1", sql.postgresql))


def fetch(connection: Connection, sql: Statement, params: Params) -> list[tuple[Any, ...]]:
    """Run a statement that returns rows (SELECT, or a write with RETURNING)."""
    cursor, text = _cursor(connection, sql, params)
    try:
        cursor.execute(text, params)
        return list(cursor.fetchall())
    except connection.dialect.loaded_dbapi.Error as error:
        raise _wrapped(connection, text, params, error, cursor) from error
    finally:
        cursor.close()


def execute(connection: Connection, sql: Statement, params: Params) -> int:
    """Run a statement that returns no rows; the number of rows it changed."""
    cursor, text = _cursor(connection, sql, params)
    try:
        cursor.execute(text, params)
        return int(cursor.rowcount)
    except connection.dialect.loaded_dbapi.Error as error:
        raise _wrapped(connection, text, params, error, cursor) from error
    finally:
        cursor.close()


def _cursor(connection: Connection, sql: Statement, params: Params) -> tuple[Any, str]:
    """A driver cursor for `sql` and the statement's text for this connection's driver, the
    observers told (`fetch` and `execute` run it: driver errors come out as SQLAlchemy's). Not a
    context manager: its generator cost a statement about 1.3 µs, and a payment runs 17."""
    text = _text(connection, sql)
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    if observers.OBSERVED:
        observers.notify(connection.engine, text, params)
    return cursor, text


def _text(connection: Connection, sql: Statement) -> str:
    return sql.postgresql if connection.dialect.name == "postgresql" else sql.sqlite


def _wrapped(connection: Connection, text: str, params: Any, error: Any, cursor: Any) -> DBAPIError:
    assert not connection.invalidated, "a statement just ran on it"
    pooled = connection.connection
    disconnect = connection.dialect.is_disconnect(error, pooled.dbapi_connection, cursor)
    wrapped = wrapped_error(connection.dialect, text, params, error, disconnect=disconnect)
    if disconnect:
        lost_connections.lost(connection, wrapped)
    return wrapped


def wrapped_error(dialect: Dialect, text: str, params: Any, error: Any, *, disconnect: bool) -> DBAPIError:
    """A driver's `error` as SQLAlchemy raises it (IntegrityError, OperationalError, ...; the
    one home of that for the engine's connections and the event loop's, `db/loop_calls.py`)."""
    wrapped = DBAPIError.instance(
        text, params, error, dialect.loaded_dbapi.Error, dialect=dialect, connection_invalidated=disconnect
    )
    assert isinstance(wrapped, DBAPIError), wrapped
    return wrapped
