"""The reads of every statement a flow runs on paycore's database, as its planner plans them.

SQLite: every statement the engine's cursors execute (`paycore.db.observers`: SQLAlchemy's and
the driver's statements of `paycore.db.driver`), planned by `EXPLAIN QUERY PLAN` with the
parameters it ran with, and the statements of the triggers it fired (a trigger's plan is not in
its statement's); not `Database.peek`'s reads, which run on connections of their own (the
per-request checks of local mode, on configuration tables). PostgreSQL: every plan that ran,
as auto_explain reports it, the statements inside the server functions, the triggers and the
foreign key checks included; with every statement prepared and planned as `plan` says:
`generic` (the plan a prepared statement, a PL/pgSQL statement or a foreign key check keeps
after its first runs, made without the values) or `custom` (made for the values).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Connection, event

from paycore.db import observers
from paycore.db.engine import Database
from tests.integration.plans.explain import (
    AUTO_EXPLAIN,
    Read,
    explained,
    index_tables,
    postgres_reads,
    sqlite_reads,
)

_PLANNED: Final = ("select", "insert", "update", "delete", "with")


@dataclass
class Captured:
    statements: list[tuple[str, Any]] = field(default_factory=list)  # SQLite: (sql, parameters)
    plans: list[dict[str, Any]] = field(default_factory=list)  # PostgreSQL: auto_explain's
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def reads(database: Database, plan: str = "custom") -> Iterator[list[Read]]:
    """Collects, in the yielded list once the block is done, every read of the block's statements."""
    found: list[Read] = []
    captured = Captured()
    engine = database.engine
    if engine.dialect.name == "postgresql":
        listener = _postgres_listener(captured, plan)
        event.listen(engine, "checkout", listener)
        event.listen(engine, "checkin", _checkin)
        try:
            yield found
        finally:
            event.remove(engine, "checkout", listener)
            event.remove(engine, "checkin", _checkin)
        with database.read() as connection:
            tables = index_tables(connection)
        for explain in captured.plans:
            found.extend(postgres_reads(explain, tables))
        return

    def statement(sql: str, parameters: Any, executemany: bool) -> None:
        if sql.lstrip().lower().startswith(_PLANNED):
            with captured.lock:
                captured.statements.append((sql, parameters[0] if executemany else parameters))

    with observers.observing(engine, statement):
        yield found
    with engine.connect() as connection:
        triggers = _triggers(connection)
        for sql, parameters in captured.statements:
            found.extend(sqlite_reads(connection, sql, parameters))
            for trigger_sql, trigger_parameters in _fired(sql, triggers):
                found.extend(sqlite_reads(connection, trigger_sql, trigger_parameters, nested=True))


def _postgres_listener(captured: Captured, plan: str) -> Any:
    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if "paycore_plan" not in record.info:
            for setting in AUTO_EXPLAIN:
                dbapi_connection.execute(setting)
            dbapi_connection.add_notice_handler(lambda notice: _notice(record.info, notice))
            dbapi_connection.prepare_threshold = 0  # every statement prepared: a plan kept, as in the long run
        if record.info.get("paycore_plan") != plan:
            dbapi_connection.execute(f"SET plan_cache_mode = force_{plan}_plan")
            record.info["paycore_plan"] = plan
        dbapi_connection.commit()
        record.info["paycore_captured"] = captured

    return checkout


def _checkin(dbapi_connection: Any, record: Any) -> None:
    record.info.pop("paycore_captured", None)


def _notice(info: dict[str, Any], notice: Any) -> None:
    captured = info.get("paycore_captured")
    plan = explained(str(notice.message_primary or ""))
    if captured is not None and plan is not None:
        with captured.lock:
            captured.plans.append(plan)


# ------------------------------------------------------------------ SQLite's triggers' statements

_TRIGGER: Final = re.compile(
    r"CREATE TRIGGER (?P<name>\w+) (?:BEFORE|AFTER) (?P<event>INSERT|UPDATE|DELETE) ON (?P<table>\w+)"
    r"(?:\s+FOR EACH ROW)?(?:\s+WHEN (?P<when>.*?))?\s+BEGIN\s+(?P<body>.*)\s+END\s*$",
    re.DOTALL | re.IGNORECASE,
)
_ROW_VALUE: Final = re.compile(r"\b(?:NEW|OLD)\.(\w+)")
_RAISE: Final = re.compile(r"RAISE\s*\(\s*\w+\s*,\s*'[^']*'\s*\)", re.IGNORECASE)
_TARGET: Final = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\s+(?:OR \w+\s+)?(?:INTO\s+|FROM\s+)?\"?(\w+)", re.IGNORECASE)


@dataclass(frozen=True)
class _Trigger:
    event: str
    table: str
    statements: tuple[str, ...]  # the WHEN clause as a SELECT, then the body's statements


def _triggers(connection: Connection) -> list[_Trigger]:
    found = []
    for (sql,) in connection.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'trigger'"):
        match = _TRIGGER.match(str(sql).strip())
        assert match is not None, sql
        statements = [f"SELECT {match['when']}"] if match["when"] else []
        statements.extend(part.strip() for part in match["body"].split(";") if part.strip())
        runnable = tuple(_RAISE.sub("NULL", statement) for statement in statements)
        found.append(_Trigger(match["event"].upper(), match["table"], runnable))
    return found


def _fired(sql: str, triggers: list[_Trigger]) -> Iterator[tuple[str, list[str]]]:
    """The statements of the triggers `sql` fires, each row value (`NEW.x`) a parameter."""
    target = _TARGET.match(sql)
    if target is None:
        return
    for trigger in triggers:
        if trigger.event == target[1].upper() and trigger.table == target[2]:
            for statement in trigger.statements:
                values = _ROW_VALUE.findall(statement)
                yield _ROW_VALUE.sub("?", statement), ["0"] * len(values)
