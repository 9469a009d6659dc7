"""Statements of the money path, run on the database driver's own connection.

Through SQLAlchemy Core a statement costs about 0.1 ms of CPU on top of the driver on this
project's machines (execution context, parameter processing, result wrapping, events), and
a transfer runs seven of them; on PostgreSQL that was most of a transfer's client time
(docs/benchmarks.md). The statements here are plain SQL, written once with `?` placeholders
(rewritten to psycopg's `%s`), and executed on the *same* connection, in the *same*
transaction, as the caller's `Connection`: nothing about atomicity changes, only the cost.

Driver errors are re-raised as SQLAlchemy's `DBAPIError` subclasses (IntegrityError,
OperationalError, ...), so `Database.transaction` retries deadlocks and bounds lock waits
exactly as it does for statements run through SQLAlchemy.

Rows come back as plain tuples in the order of the statement's columns; booleans come back
as 0/1 from SQLite, so callers convert them.

**Deferred writes (PostgreSQL).** A write whose result nobody reads and whose failure can
only fail the transaction (`defer`) is not sent at once: it is queued on the connection and
sent, in order, in one round trip with whatever comes next: the next statement (driver or
SQLAlchemy), or the COMMIT (psycopg's pipeline mode). A transaction's first statement goes in
a pipeline too, so its BEGIN costs no round trip of its own. Nothing about the transaction
changes but when its writes travel: a deferred write's error (a constraint, a deadlock) comes
out of the statement or the commit that sent it, as a `DBAPIError`, and the transaction rolls
back. Callers must not defer a write whose failure they would catch (ADR 0009). On SQLite,
which has no round trips, `defer` runs the write at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

Params = Sequence[Any]


@dataclass(frozen=True)
class Statement:
    sqlite: str
    postgresql: str


def statement(text: str) -> Statement:
    """One statement for both drivers, from SQL written with `?` placeholders."""
    assert "%" not in text, "a literal % would need escaping for psycopg"
    return Statement(sqlite=text, postgresql=text.replace("?", "%s"))


_DEFERRED = "paycore_deferred_writes"  # key of the queue in the pooled connection's info


def fetch(connection: Connection, sql: Statement, params: Params) -> list[tuple[Any, ...]]:
    """Run a statement that returns rows (SELECT, or a write with RETURNING)."""
    with _cursor(connection, sql, params) as cursor:
        return list(cursor.fetchall())


def execute(connection: Connection, sql: Statement, params: Params) -> int:
    """Run a statement that returns no rows; the number of rows it changed."""
    with _cursor(connection, sql, params) as cursor:
        return int(cursor.rowcount)


def defer(connection: Connection, sql: Statement, params: Params) -> None:
    """Run a write whose result nobody reads, with the next round trip (module docstring)."""
    if connection.dialect.name != "postgresql":
        execute(connection, sql, params)
        return
    connection.info.setdefault(_DEFERRED, []).append((sql.postgresql, tuple(params)))


def flush(connection: Connection, *, commit: bool = False) -> None:
    """Send the deferred writes now, in one round trip, with the COMMIT if `commit`."""
    deferred = connection.info.pop(_DEFERRED, None)
    if not deferred:
        return
    raw = connection.connection.driver_connection
    try:
        with raw.pipeline(), raw.cursor() as cursor:  # type: ignore[union-attr]
            for text, params in deferred:
                cursor.execute(text, params)
            if commit:
                raw.commit()  # type: ignore[union-attr]
    except connection.dialect.loaded_dbapi.Error as error:
        raise _wrapped(connection, deferred[0][0], deferred[0][1], error) from error


def discard(info: dict[Any, Any]) -> None:
    """Forget deferred writes of a transaction that rolled back (or a connection reset)."""
    info.pop(_DEFERRED, None)


@contextmanager
def _cursor(connection: Connection, sql: Statement, params: Params) -> Iterator[Any]:
    """A driver cursor that has run `sql`; driver errors come out as SQLAlchemy's."""
    text = _text(connection, sql)
    raw = connection.connection.driver_connection
    cursor = raw.cursor()  # type: ignore[union-attr]
    try:
        if connection.dialect.name == "postgresql" and _pipelined(connection, raw):
            with raw.pipeline():  # type: ignore[union-attr]
                for deferred_text, deferred_params in connection.info.pop(_DEFERRED, ()):
                    cursor.execute(deferred_text, deferred_params)
                cursor.execute(text, params)
        else:
            cursor.execute(text, params)
        yield cursor
    except connection.dialect.loaded_dbapi.Error as error:
        raise _wrapped(connection, text, params, error) from error
    finally:
        cursor.close()


def _pipelined(connection: Connection, raw: Any) -> bool:
    """Send this statement in a pipeline: with deferred writes, or with the BEGIN psycopg
    would otherwise send in a round trip of its own."""
    return bool(connection.info.get(_DEFERRED)) or raw.info.transaction_status == 0  # IDLE


def _text(connection: Connection, sql: Statement) -> str:
    return sql.postgresql if connection.dialect.name == "postgresql" else sql.sqlite


def _wrapped(connection: Connection, text: str, params: Any, error: Exception) -> DBAPIError:
    wrapped = DBAPIError.instance(
        text,
        params,
        error,
        connection.dialect.loaded_dbapi.Error,
        dialect=connection.dialect,
    )
    assert isinstance(wrapped, DBAPIError), wrapped
    return wrapped
