"""Small SQL helpers shared by repositories, for the statements whose syntax is dialect-specific."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert


def insert_or_ignore(
    connection: Connection,
    table: Table,
    values: Mapping[str, Any],
    conflict_columns: Sequence[str],
) -> bool:
    """INSERT ... ON CONFLICT (cols) DO NOTHING; True when the row was inserted.

    On PostgreSQL a conflicting row that another transaction has inserted but not yet
    committed makes this wait (bounded by lock_timeout) for that transaction's outcome.
    """
    statement = _insert_or_ignore(connection.dialect.name, table, tuple(conflict_columns))
    return connection.execute(statement, dict(values)).first() is not None


@cache
def _insert_or_ignore(dialect: str, table: Table, conflict_columns: tuple[str, ...]) -> Insert:
    # Built once per (dialect, table, conflict target) and reused with bind parameters.
    target = list(conflict_columns)
    returned = table.c[conflict_columns[-1]]
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=target).returning(returned)
    return sqlite.insert(table).on_conflict_do_nothing(index_elements=target).returning(returned)
