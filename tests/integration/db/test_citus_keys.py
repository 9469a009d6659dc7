"""Keys and constraints Citus accepts (issue 43 §2, ADR 0031), checked on plain PostgreSQL so
that the rule holds without Citus: on a distributed table every primary key, unique constraint,
unique index and foreign key includes `tenant_id`, and a foreign key between distributed tables
joins them on `tenant_id` (colocated, all in one group); a key without `tenant_id` is allowed
only on a reference table or a coordinator table of `paycore.db.distribute`, the lists
`paycore db distribute` places by."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, text

from paycore.db.distribute import COORDINATOR_TABLES, DISTRIBUTION_COLUMN, REFERENCE_TABLES
from paycore.db.engine import Database

pytestmark = pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)

# Every unique index (a constraint's or a bare one) and primary key, with its columns.
_UNIQUE_KEYS = text(
    """
    SELECT c.relname, i.relname,
           array(SELECT a.attname FROM unnest(x.indkey) k JOIN pg_attribute a
                 ON a.attrelid = x.indrelid AND a.attnum = k)::text[]
    FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
    WHERE c.relnamespace = 'public'::regnamespace AND (x.indisunique OR x.indisprimary)
    ORDER BY 1, 2
    """
)
# Every foreign key: its table, name, columns, the table it references and those columns.
_FOREIGN_KEYS = text(
    """
    SELECT conrelid::regclass::text, conname, confrelid::regclass::text,
           array(SELECT a.attname FROM unnest(conkey) k JOIN pg_attribute a
                 ON a.attrelid = conrelid AND a.attnum = k)::text[],
           array(SELECT a.attname FROM unnest(confkey) k JOIN pg_attribute a
                 ON a.attrelid = confrelid AND a.attnum = k)::text[]
    FROM pg_constraint WHERE contype = 'f' AND connamespace = 'public'::regnamespace ORDER BY 1, 2
    """
)
_GLOBAL = set(REFERENCE_TABLES) | set(COORDINATOR_TABLES)


def _keys(connection: Connection) -> list[tuple[str, str, list[str]]]:
    return [(str(t), str(i), list(columns)) for t, i, columns in connection.execute(_UNIQUE_KEYS)]


def test_every_unique_key_without_tenant_id_is_on_a_reference_or_coordinator_table(database: Database) -> None:
    with database.read() as connection:
        keys = _keys(connection)
    assert len(keys) > 30, keys  # the migrated schema, not an empty one
    without = [(table, index) for table, index, columns in keys if DISTRIBUTION_COLUMN not in columns]
    assert [(t, i) for t, i in without if t not in _GLOBAL] == []
    # Today's keys without tenant_id, all on tables Citus copies whole or leaves on the coordinator.
    assert {index for _, index in without} == {
        "alembic_version_pkc",
        "uq_api_keys_key_hash",
        "uq_operators_name",
        "uq_operators_token_hash",
        "uq_operator_sessions_token_hash",
    }


def test_every_foreign_key_between_distributed_tables_joins_on_tenant_id(database: Database) -> None:
    with database.read() as connection:
        foreign_keys = list(connection.execute(_FOREIGN_KEYS))
    assert foreign_keys, "the ledger's foreign keys are expected"
    refused = []
    for table, name, target, columns, target_columns in foreign_keys:
        if target in REFERENCE_TABLES:
            continue  # Citus accepts a foreign key to a reference table from anywhere
        if table in _GLOBAL:
            refused.append(f"{name}: {table} is not distributed, it may reference only a reference table")
        elif (
            DISTRIBUTION_COLUMN not in columns
            or list(target_columns)[list(columns).index(DISTRIBUTION_COLUMN)] != DISTRIBUTION_COLUMN
        ):
            refused.append(f"{name}: {table}({', '.join(columns)}) -> {target}: not colocated on {DISTRIBUTION_COLUMN}")
    assert refused == []


def test_every_table_but_the_global_ones_has_tenant_id(database: Database) -> None:
    with database.read() as connection:
        without = (
            connection.execute(
                text(
                    "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'"
                    " AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = :column)"
                ),
                {"column": DISTRIBUTION_COLUMN},
            )
            .scalars()
            .all()
        )
    assert sorted(set(without) - _GLOBAL) == []
