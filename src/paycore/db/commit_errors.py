"""An error raised at COMMIT by a Citus worker, given back its own SQLSTATE (ADR 0031).

On Citus a transaction whose writes all went to one worker commits there with a plain COMMIT.
An error the worker raises at that COMMIT (a deferred constraint trigger's, such as the
ledger's `ledger_entries_balanced`, or a serialization failure) reaches the client as
`XX000` "could not commit transaction for shard N on at least one active node"; the worker's
own error arrives only as a WARNING just before it. paycore's error mapping reads SQLSTATEs
(`IntegrityError` for a refused write, 40001/40P01 retried by `Database.transaction`), so the
error is raised again as the one the worker raised: the same class and SQLSTATE as on one
PostgreSQL, the worker's message. Nothing else changes: the transaction was rolled back on
every node either way.

On plain PostgreSQL a COMMIT never fails with that message, and a WARNING is rare, so the cost
is one check per error and one call per notice.
"""

from __future__ import annotations

import weakref
from typing import Any, Final

import psycopg
from sqlalchemy import Engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError

_CITUS_COMMIT_FAILED: Final = "could not commit transaction for shard"
_INTERNAL_ERROR: Final = "XX000"
_WARNINGS_KEPT: Final = 4
# Per driver connection: the last warnings that carry another SQLSTATE than a warning's (class
# 01), (SQLSTATE, message). Emptied when a COMMIT starts, so only that COMMIT's are read.
_warnings: weakref.WeakKeyDictionary[Any, list[tuple[str, str]]] = weakref.WeakKeyDictionary()


def install(engine: Engine) -> None:
    """Keep each connection's warnings and raise a worker's COMMIT error as its own."""
    event.listen(engine, "connect", _watch)
    event.listen(engine, "commit", _forget)
    event.listen(engine, "handle_error", _unwrap)


def _watch(dbapi_connection: Any, _record: Any) -> None:
    kept: list[tuple[str, str]] = []
    _warnings[dbapi_connection] = kept

    def keep(diagnostic: psycopg.errors.Diagnostic) -> None:
        code = diagnostic.sqlstate or ""
        if diagnostic.severity_nonlocalized == "WARNING" and code and not code.startswith("01"):
            del kept[: max(0, len(kept) - _WARNINGS_KEPT + 1)]
            kept.append((code, diagnostic.message_primary or ""))

    dbapi_connection.add_notice_handler(keep)


def _forget(connection: Any) -> None:
    kept = _warnings.get(_driver_connection(connection))
    if kept is not None:
        kept.clear()


def _driver_connection(connection: Any) -> Any:
    try:
        return connection.connection.dbapi_connection
    except Exception:  # a connection already closed or invalidated: nothing kept for it
        return None


def worker_error(error: BaseException, warnings: list[tuple[str, str]]) -> psycopg.Error | None:
    """The worker's own error behind Citus's COMMIT failure `error`, or None if it is not one
    (or the worker's error was not seen)."""
    if getattr(error, "sqlstate", None) != _INTERNAL_ERROR or not str(error).startswith(_CITUS_COMMIT_FAILED):
        return None
    if not warnings:
        return None
    code, message = warnings[-1]
    try:
        kind = psycopg.errors.lookup(code)
    except KeyError:  # paycore's own codes (PC001...): the class of their first two characters
        kind = psycopg.errors.get_base_exception(code)
    found = kind(message)
    found.sqlstate = code
    return found


def _unwrap(context: ExceptionContext) -> DBAPIError | None:
    if context.connection is None or context.sqlalchemy_exception is None:
        return None
    kept = _warnings.get(_driver_connection(context.connection))
    original = worker_error(context.original_exception, kept or [])
    if original is None:
        return None
    wrapped = DBAPIError.instance(
        context.statement, context.parameters, original, psycopg.Error, dialect=context.dialect
    )
    assert isinstance(wrapped, DBAPIError), wrapped
    return wrapped
