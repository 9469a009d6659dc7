"""Small SQL helpers shared by repositories, for the statements whose syntax is dialect-specific."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import cache, lru_cache
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    Integer,
    SmallInteger,
    String,
    Table,
    Text,
    Update,
    and_,
    bindparam,
    or_,
    update,
)

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
    resolutions and reversals, the sandbox's dedupe). The driver takes values as they are, so
    the statement is refused (TypeError, once per table and column set) for a column that is
    not a plain string, integer or boolean, or that has a Python-side default left unset.
    """
    names = tuple(values)
    statement = _insert_or_ignore(table, names, tuple(conflict_columns))
    return bool(driver.fetch(connection, statement, [values[name] for name in names]))


# Exact types, not subclasses: Enum is a String and would need its values converted.
_PLAIN_TYPES = frozenset({String, Text, Integer, BigInteger, SmallInteger, Boolean})


@cache
def _insert_or_ignore(table: Table, names: tuple[str, ...], conflict_columns: tuple[str, ...]) -> driver.Statement:
    # Built once per (table, columns given, conflict target). Identifiers are quoted: one
    # column is called "key".
    unknown = set(names + conflict_columns) - set(table.c.keys())
    if unknown:
        raise TypeError(f"{table.name} has no column {sorted(unknown)}")
    for column in table.columns:
        # What the driver cannot do that SQLAlchemy would: convert a value, fill a default.
        if column.key in names and type(column.type) not in _PLAIN_TYPES:
            raise TypeError(f"{table.name}.{column.name} is {column.type!r}: not a plain driver type")
        if column.key not in names and (column.default is not None or column.onupdate is not None):
            raise TypeError(f"{table.name}.{column.name} has a Python-side default: pass its value")
    columns = ", ".join(f'"{table.c[name].name}"' for name in names)
    marks = ", ".join("?" * len(names))
    target = ", ".join(f'"{table.c[name].name}"' for name in conflict_columns)
    return driver.statement(
        f'INSERT INTO "{table.name}" ({columns}) VALUES ({marks})'
        f" ON CONFLICT ({target}){_partial_index_predicate(table, conflict_columns)} DO NOTHING"
        f' RETURNING "{table.c[conflict_columns[-1]].name}"'
    )


def _partial_index_predicate(table: Table, conflict_columns: tuple[str, ...]) -> str:
    """` WHERE <predicate>` when the conflict target is a partial unique index, else "".

    Both databases need the index's predicate in the ON CONFLICT clause to pick a partial
    index as the arbiter; both also accept it for a full unique index or constraint, so the
    statement works before and after a migration that makes an index partial.
    """
    for index in table.indexes:
        if index.unique and {column.key for column in index.columns} == set(conflict_columns):
            predicate = index.dialect_options["postgresql"]["where"]
            if predicate is not None:
                if str(predicate) != str(index.dialect_options["sqlite"]["where"]):
                    raise TypeError(f"{index.name}: its predicate must be the same on both databases")
                return f" WHERE {predicate}"
    return ""


def filter_only(column: Any) -> Any:
    """`column` as an expression no index can search (`column || ''`): a condition on it filters
    the rows another index found and never chooses the index. For a column that leads an index
    after the tenant (e.g. the events' `kind` and `type`) beside the key the query really
    searches by: without statistics SQLite rates (tenant_id, kind) as good a search as
    (tenant_id, object_id) and may read every state change of the tenant."""
    return column.concat("")


def keys_in(columns: Sequence[Any], keys: Collection[tuple[Any, ...]]) -> Any:
    """`(c1, ..., cn) IN keys` as PostgreSQL plans well: grouped by all but the last column,
    `c1 = :a AND ... AND cn = ANY(:ids)` per group, OR-ed (a row-value IN list of hundreds of
    keys is planned as a filter over a scan; this is an index scan per group)."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for key in keys:
        groups.setdefault(tuple(key[:-1]), []).append(key[-1])
    *leading, last = columns
    return or_(
        *(
            and_(*(column == value for column, value in zip(leading, prefix, strict=True)), last.in_(ids))
            for prefix, ids in groups.items()
        )
    )


# UPDATE statements kept built: one per (table, key columns, columns set, status check) the
# code uses, a few dozen; past this many the least used is built again when next needed.
_UPDATE_SHAPES_MAX: Final = 256


def update_by_key(
    connection: Connection,
    table: Table,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    *,
    status_in: Collection[str] | None = None,
) -> int:
    """`UPDATE table SET values WHERE key [AND status IN status_in]`; the rows changed. The
    statement is built once per shape, with bind parameters: building a SQLAlchemy UPDATE and
    its cache key on every call cost as much CPU as running it (bench/profile_api.py)."""
    statement = _update_by_key(table, tuple(key), tuple(values), status_in is not None)
    parameters = {f"k_{name}": value for name, value in key.items()}
    parameters.update({f"v_{name}": value for name, value in values.items()})
    if status_in is not None:
        parameters["status_in"] = list(status_in)
    return int(connection.execute(statement, parameters).rowcount)


@lru_cache(maxsize=_UPDATE_SHAPES_MAX)
def _update_by_key(table: Table, key: tuple[str, ...], columns: tuple[str, ...], by_status: bool) -> Update:
    conditions = [table.c[name] == bindparam(f"k_{name}") for name in key]
    if by_status:
        conditions.append(table.c.status.in_(bindparam("status_in", expanding=True)))
    return update(table).where(*conditions).values({name: bindparam(f"v_{name}") for name in columns})
