"""Distribute the schema by tenant on a Citus coordinator (ADR 0031, `paycore db distribute`).

Every table leads with `tenant_id` (SPEC §1). On Citus each table is one of:

- **distributed** by `tenant_id`, all in one colocation group, so that a tenant's rows of every
  table live on one node and a transaction, a join or a foreign key of one tenant stays there;
- a **reference table** (`REFERENCE_TABLES`), copied whole to every node: the small global
  tables looked up before the tenant is known (an API key by its hash, an operator by name or
  by session token) or read with every tenant's rows;
- **local to the coordinator** (`COORDINATOR_TABLES`): Alembic's version row.

This module knows no domain: it reads the catalogue, plans, and calls Citus's functions. The
same lists are checked on plain PostgreSQL by tests/integration/db/test_citus_keys.py, so a
migration that adds a key Citus would refuse fails the suite without Citus.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from sqlalchemy import Connection, text

from paycore.db import distribute_functions
from paycore.db.engine import Database

DISTRIBUTION_COLUMN: Final = "tenant_id"
# Small, global, looked up before the tenant is known or joined with every tenant's rows.
REFERENCE_TABLES: Final = (
    "tenants",
    "tenant_settings",
    "api_keys",
    "operators",
    "operator_sessions",
    "operator_sign_in_failures",
    "operator_sign_in_counts",
)
# Plain tables on the coordinator, where migrations run; never joined with tenants' rows.
COORDINATOR_TABLES: Final = ("alembic_version",)
# The first distributed table; every other one is colocated with it.
COLOCATION_ANCHOR: Final = "ledger_accounts"
TABLES_MAX: Final = 200  # a bound on the catalogue's answer; paycore has ~35 tables

Placement = Literal["reference", "distributed"]


class NotCitus(Exception):
    """The database is not a Citus coordinator: nothing was changed."""


class CannotDistribute(Exception):
    """The schema does not fit the plan (a table without `tenant_id`, a table distributed
    another way): nothing more was changed."""


@dataclass(frozen=True)
class Step:
    table: str
    placement: Placement


@dataclass(frozen=True)
class Catalogue:
    tables: tuple[str, ...]  # the public schema's base tables
    without_tenant: frozenset[str]  # tables that have no `tenant_id` column
    references: tuple[tuple[str, str], ...]  # (referencing table, referenced table) per foreign key
    placed: dict[str, Placement]  # tables Citus already knows, by how they are placed


def plan(catalogue: Catalogue) -> list[Step]:
    """The steps still to run, in an order Citus accepts: reference tables first, then the
    anchor, then each distributed table after the tables its foreign keys point at."""
    unknown = sorted(catalogue.without_tenant - set(REFERENCE_TABLES) - set(COORDINATOR_TABLES))
    if unknown:
        raise CannotDistribute(f"tables without {DISTRIBUTION_COLUMN}, not in REFERENCE_TABLES: {', '.join(unknown)}")
    wanted: dict[str, Placement] = {}
    for table in catalogue.tables:
        if table in COORDINATOR_TABLES:
            continue
        wanted[table] = "reference" if table in REFERENCE_TABLES else "distributed"
    for table, placement in catalogue.placed.items():
        if table in wanted and wanted[table] != placement:
            raise CannotDistribute(f"{table} is already a {placement} table; paycore wants it {wanted[table]}")
    references = [Step(t, "reference") for t in REFERENCE_TABLES if t in wanted]
    distributed = _in_reference_order(sorted(t for t, p in wanted.items() if p == "distributed"), catalogue.references)
    return [step for step in references + distributed if step.table not in catalogue.placed]


def _in_reference_order(tables: list[str], references: tuple[tuple[str, str], ...]) -> list[Step]:
    """The anchor first, then every table after the tables it references (a self-reference
    does not count). Bounded: each pass places at least one table or the schema has a cycle."""
    ordered = [COLOCATION_ANCHOR] if COLOCATION_ANCHOR in tables else []
    remaining = [t for t in tables if t not in ordered]
    for _ in range(len(tables) + 1):
        if not remaining:
            return [Step(t, "distributed") for t in ordered]
        ready = [
            t
            for t in remaining
            if all(
                target in ordered or target == t or target not in tables for source, target in references if source == t
            )
        ]
        if not ready:
            break
        ordered += ready
        remaining = [t for t in remaining if t not in ready]
    raise CannotDistribute(f"foreign keys form a cycle among: {', '.join(remaining)}")


def read_catalogue(connection: Connection) -> Catalogue:
    tables = tuple(
        connection.execute(
            text(
                "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
                " AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname LIMIT :limit"
            ),
            {"limit": TABLES_MAX},
        ).scalars()
    )
    with_tenant = set(
        connection.execute(
            text(
                "SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
                " WHERE c.relnamespace = 'public'::regnamespace AND a.attname = :column AND NOT a.attisdropped"
            ),
            {"column": DISTRIBUTION_COLUMN},
        ).scalars()
    )
    references = tuple(
        (str(source), str(target))
        for source, target in connection.execute(
            text(
                "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
                " WHERE contype = 'f' AND connamespace = 'public'::regnamespace"
            )
        )
    )
    placed: dict[str, Placement] = {}
    for table, method in connection.execute(
        text("SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition")
    ):
        if method == "h":
            placed[str(table)] = "distributed"
        elif method == "n":
            placed[str(table)] = "reference"
        else:  # an append- or range-distributed table is none of paycore's doing
            raise CannotDistribute(f"{table} is distributed by method {method!r}")
    return Catalogue(tables, frozenset(set(tables) - with_tenant), references, placed)


def citus_refusal(database: Database) -> str | None:
    """Why `distribute` cannot run on this database, or None on a Citus coordinator."""
    if not database.is_postgres:
        return "this is SQLite: Citus is a PostgreSQL extension; paycore keeps working unchanged"
    with database.engine.connect() as connection:
        version = connection.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'citus'")).scalar()
        if version is None:
            return (
                "the citus extension is not installed in this database (CREATE EXTENSION citus on a"
                " coordinator with workers added): plain PostgreSQL keeps working unchanged"
            )
        if not connection.execute(text("SELECT citus_is_coordinator()")).scalar():
            return "this is not the Citus coordinator (citus_is_coordinator() is false): connect to the coordinator"
    return None


def distribute(database: Database, report: Callable[[str], None]) -> int:
    """Place every table not yet placed, one transaction per table, then delegate every server
    function not yet delegated (`distribute_functions`); returns how many changes. Run again it
    finds nothing to do. Raises NotCitus before changing anything."""
    refusal = citus_refusal(database)
    if refusal is not None:
        raise NotCitus(refusal)
    with database.engine.connect() as connection:
        catalogue = read_catalogue(connection)
    steps = plan(catalogue)
    for table in sorted(catalogue.placed):
        report(f"{table}: already a {catalogue.placed[table]} table")
    for step in steps:
        with database.engine.begin() as connection:
            _place(connection, step)
        report(_done(step))
    return len(steps) + _delegate_functions(database, report)


def _delegate_functions(database: Database, report: Callable[[str], None]) -> int:
    with database.engine.connect() as connection:
        functions = distribute_functions.read_functions(connection)
    waiting = [function for function in functions if not function.delegated]
    if len(waiting) < len(functions):
        report(f"{len(functions) - len(waiting)} server function(s) already delegated by tenant")
    for function in waiting:
        with database.engine.begin() as connection:
            distribute_functions.delegate(connection, function, COLOCATION_ANCHOR)
        report(f"{function.signature.split('(')[0]}: delegated by {distribute_functions.TENANT_ARGUMENT}")
    return len(waiting) + _bound_lock_waits(database, functions, report)


def _bound_lock_waits(
    database: Database, functions: list[distribute_functions.Function], report: Callable[[str], None]
) -> int:
    """Each function's own lock_timeout, paycore's `idempotency_wait_ms` (distribute_functions)."""
    wanted_ms = database.settings.idempotency_wait_ms
    unbound = [function for function in functions if function.lock_timeout != str(wanted_ms)]
    for function in unbound:
        with database.engine.begin() as connection:
            distribute_functions.bound_lock_waits(connection, function, wanted_ms)
        report(f"{function.signature.split('(')[0]}: lock waits bounded at {wanted_ms} ms")
    return len(unbound)


def _place(connection: Connection, step: Step) -> None:
    # Citus refuses to distribute a table with triggers unless told that they are safe:
    # paycore's are (append-only, balance and publish triggers touch only the same tenant's
    # rows of colocated tables, ADR 0031).
    connection.execute(text("SET LOCAL citus.enable_unsafe_triggers = on"))
    if step.placement == "reference":
        connection.execute(text("SELECT create_reference_table(:table)"), {"table": step.table})
        return
    colocate = "none" if step.table == COLOCATION_ANCHOR else COLOCATION_ANCHOR
    connection.execute(
        text("SELECT create_distributed_table(:table, :column, colocate_with => :colocate)"),
        {"table": step.table, "column": DISTRIBUTION_COLUMN, "colocate": colocate},
    )


def _done(step: Step) -> str:
    if step.placement == "reference":
        return f"{step.table}: reference table (a copy on every node)"
    if step.table == COLOCATION_ANCHOR:
        return f"{step.table}: distributed by {DISTRIBUTION_COLUMN}"
    return f"{step.table}: distributed by {DISTRIBUTION_COLUMN}, colocated with {COLOCATION_ANCHOR}"


# What a migration's session needs on a Citus coordinator (ADR 0031): a trigger created, altered
# or dropped on a distributed table needs `citus.enable_unsafe_triggers`; and a migration that
# alters a distributed table (one connection per shard, in parallel) and then creates a function
# in the same transaction is refused unless Citus keeps to one connection per node.
_MIGRATION_SETTINGS: Final = {"citus.enable_unsafe_triggers": "on", "citus.multi_shard_modify_mode": "sequential"}


def is_citus(connection: Connection) -> bool:
    found = connection.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'citus'")).first()
    return found is not None


def set_migration_settings(connection: Connection, *, on: bool) -> None:
    """Set (or reset) `_MIGRATION_SETTINGS` for this session; the caller has checked `is_citus`."""
    for name, value in _MIGRATION_SETTINGS.items():
        if on:
            connection.execute(text("SELECT set_config(:name, :value, false)"), {"name": name, "value": value})
        else:
            connection.execute(text(f"RESET {name}"))
