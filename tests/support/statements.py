"""The statements a block sends to the database, as the data-plane tests count them (ADR 0026):
each statement's SQL, whitespace folded and cut at 160 characters, and `COMMIT` for each commit
of the engine's own. `PAYCORE_PRINT_STATEMENTS=1` prints them after the block."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from paycore.db import observers
from paycore.db.engine import Database

PRINT = os.environ.get("PAYCORE_PRINT_STATEMENTS") == "1"


@contextmanager
def counting(database: Database) -> Iterator[list[str]]:
    statements: list[str] = []

    def statement(sql: str, parameters: Any, executemany: bool) -> None:
        statements.append(" ".join(sql.split())[:160])

    def commit(conn: Any) -> None:
        statements.append("COMMIT")

    event.listen(database.engine, "commit", commit)
    try:
        with observers.observing(database.engine, statement):
            yield statements
    finally:
        event.remove(database.engine, "commit", commit)
    if PRINT:
        print("\n".join(statements))
