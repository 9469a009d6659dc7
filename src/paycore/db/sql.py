"""Small SQL helpers shared by repositories, for the statements whose syntax is dialect-specific."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite


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
    module = postgresql if connection.dialect.name == "postgresql" else sqlite
    statement = (
        module.insert(table)
        .values(dict(values))
        .on_conflict_do_nothing(index_elements=list(conflict_columns))
        .returning(table.c[conflict_columns[-1]])
    )
    return connection.execute(statement).first() is not None
