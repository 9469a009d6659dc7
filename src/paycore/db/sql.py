"""Small SQL helpers shared by repositories, for the statements whose syntax is dialect-specific."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, Table

from paycore.db import driver


def insert_or_ignore(
    connection: Connection,
    table: Table,
    values: Mapping[str, Any],
    conflict_columns: Sequence[str],
) -> bool:
    """INSERT ... ON CONFLICT (cols) DO NOTHING; True when the row was inserted.

    On PostgreSQL a conflicting row that another transaction has inserted but not yet
    committed makes this wait (bounded by lock_timeout) for that transaction's outcome.

    Runs on the driver (paycore.db.driver): it is on the money path (idempotency keys, ledger
    resolutions and reversals, the sandbox's dedupe), and every column paycore declares is a
    plain string, integer or boolean with no Python-side default, so the driver takes the
    values as they are.
    """
    names = tuple(values)
    statement = _insert_or_ignore(table, names, tuple(conflict_columns))
    return bool(driver.fetch(connection, statement, [values[name] for name in names]))


@cache
def _insert_or_ignore(table: Table, names: tuple[str, ...], conflict_columns: tuple[str, ...]) -> driver.Statement:
    # Built once per (table, columns given, conflict target). Identifiers are quoted: one
    # column is called "key".
    unknown = set(names + conflict_columns) - set(table.c.keys())
    assert not unknown, f"{table.name} has no column {sorted(unknown)}"
    columns = ", ".join(f'"{name}"' for name in names)
    marks = ", ".join("?" * len(names))
    target = ", ".join(f'"{name}"' for name in conflict_columns)
    return driver.statement(
        f'INSERT INTO "{table.name}" ({columns}) VALUES ({marks})'
        f' ON CONFLICT ({target}) DO NOTHING RETURNING "{conflict_columns[-1]}"'
    )
