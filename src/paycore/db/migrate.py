"""Run Alembic migrations programmatically, safely from several processes at once.

Alembic is imported only when a migration runs or the scripts are read: a database already at
`HEAD_REVISION` (every start of `paycore serve`, `worker` and the CLI's commands, but the
first) is told so by one plain query, and importing Alembic cost each process ~0.085 s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sqlalchemy import Connection, inspect, text

from paycore.config import Settings
from paycore.db import distribute, statistics
from paycore.db.engine import Database
from paycore.db.engines import is_sqlite_memory

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_PATH = Path(__file__).parent / "migrations"
# Any constant will do: it only has to be the same in every paycore process.
_ADVISORY_LOCK_KEY = 0x70617963  # "payc"
# Alembic keeps the running migration's context in module globals (`alembic.context`,
# `alembic.op`): two upgrades at once in one process would run on each other's connections
# (e.g. concurrent `paycore.refunds.handle` calls, each migrating its own memory database).
_IN_PROCESS_LOCK = threading.Lock()


# The newest migration's revision: tests/migrations/test_migrations.py checks that it is the
# scripts' head, so a new migration that does not move it fails the suite.
HEAD_REVISION: Final = "0055"


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_PATH))
    return config


def head_revision() -> str | None:
    """The head of the migration scripts (read by Alembic); `HEAD_REVISION` says the same."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(database: Database) -> str | None:
    """The database's revision, None before the first migration (Alembic's version table,
    read with plain SQL: paycore's chain of migrations has one head)."""
    with database.engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        found = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(found) > 1:
        raise RuntimeError(f"the database has several revisions: {sorted(found)}")
    return found[0] if found else None


def upgrade(database: Database, revision: str = "head") -> None:
    """Upgrade to `revision`, then gather the planner's statistics if a migration ran. On
    PostgreSQL an advisory lock serialises concurrent upgrades; on SQLite the migration's
    transaction takes the write lock when it begins. An in-memory
    SQLite database with nothing in it, upgraded to head, is a copy of this process's migrated
    template (`_SqliteTemplate`)."""
    if revision == "head" and is_sqlite_memory(database.settings.database_url) and _SQLITE_TEMPLATE.copy_into(database):
        return
    if revision == "head" and current_revision(database) == HEAD_REVISION:
        return  # nothing to run (no later revision exists in this code)
    before = current_revision(database)
    run(database, _upgrade_to(revision))
    if current_revision(database) != before:  # not when another process had just migrated it
        gather_statistics(database)


def gather_statistics(database: Database) -> list[str]:
    """ANALYZE every table that holds a row (`paycore.db.statistics`, which says why not the
    empty ones); the tables analyzed."""
    with database.engine.connect() as connection:
        return statistics.analyze(connection)


def upgrade_new(database: Database) -> None:
    """`upgrade` to head of a database this process has just made and no other process knows
    (a new file in a new directory, as each world of `paycore simulate`): on SQLite an empty one
    is a copy of the template, as an in-memory database is. Nothing can write to such a file
    between the emptiness check and the copy; `upgrade` cannot know that of a file."""
    if database.is_postgres or not _SQLITE_TEMPLATE.copy_into(database):
        upgrade(database)


class _SqliteTemplate:
    """An in-memory SQLite database at head, migrated once per process, copied page by page
    (SQLite's backup API) into every empty in-memory database upgraded to head after it, and
    into a new file given to `upgrade_new`.

    Running the migrations costs ~0.35 s here, a copy ~1 ms: the migrations were 90% of a call
    of `paycore.refunds.handle` (SPEC 7.2), which migrates a new in-memory database every
    time. The copy is the template's pages, so the schema, its seed rows and `alembic_version`
    are exactly what the migrations wrote; the connection keeps its own settings (foreign keys,
    busy timeout) and journal mode. Only databases no other process can see (in memory, or a
    new file its caller vouches for: `upgrade_new`), so that nothing writes to one between the
    emptiness check and the copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._database: Database | None = None

    def copy_into(self, database: Database) -> bool:
        """Copy the template into `database` if it has no schema object yet; True if it did."""
        with database.engine.connect() as connection:
            if connection.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar_one() != 0:
                return False
            connection.rollback()  # the backup writes outside any transaction of the target's
            target = connection.connection.driver_connection
            with self._lock:
                source = self._migrated()
                with source.engine.connect() as template:
                    template.connection.driver_connection.backup(target)  # type: ignore[union-attr]
        return True

    def _migrated(self) -> Database:
        if self._database is None:
            database = Database(Settings(database_url="sqlite://"))
            run(database, _upgrade_to("head"))
            self._database = database
        return self._database


_SQLITE_TEMPLATE = _SqliteTemplate()


def downgrade(database: Database, revision: str) -> None:
    """Downgrade to `revision` (tests and runbooks; paycore's CLI only upgrades)."""
    from alembic import command

    run(database, lambda config: command.downgrade(config, revision))


def _upgrade_to(revision: str) -> Callable[[Config], None]:
    def action(config: Config) -> None:
        from alembic import command

        command.upgrade(config, revision)

    return action


def run(database: Database, action: Callable[[Config], None], **attributes: object) -> None:
    """Run an Alembic command (`action`) on one connection of `database`, committed at the end;
    `attributes` reach the migrations as `config.attributes`."""
    config = alembic_config()
    config.attributes.update(attributes)
    on_citus = False
    with database.engine.connect() as connection:
        if database.is_postgres:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})
            on_citus = distribute.is_citus(connection)
            if on_citus:
                distribute.set_migration_settings(connection, on=True)
            connection.commit()
        else:
            _sqlite_foreign_keys(connection, on=False)
        try:
            config.attributes["connection"] = connection
            with _IN_PROCESS_LOCK:
                action(config)
            connection.commit()
        finally:
            if database.is_postgres:
                connection.rollback()  # a no-op after the commit; undoes a failed migration
                if on_citus:
                    distribute.set_migration_settings(connection, on=False)
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _ADVISORY_LOCK_KEY})
                connection.commit()
            else:
                connection.rollback()  # a no-op after the commit; undoes a failed migration
                _sqlite_foreign_keys(connection, on=True)


def _sqlite_foreign_keys(connection: Connection, *, on: bool) -> None:
    """SQLite copies a table to change its constraints (batch mode). With foreign keys on,
    dropping the old copy of a table that others reference (the ledger's transfers and
    accounts) would check, or cascade to, their rows, so they are off while migrations run,
    as SQLite's own procedure for altering a table says. The pragma only takes effect
    outside a transaction: it runs on the driver, before the migration's BEGIN and after
    its COMMIT."""
    driver_connection = connection.connection.driver_connection
    assert driver_connection is not None
    driver_connection.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


def check_sqlite_foreign_keys(connection: Connection) -> None:
    """Every foreign key must hold before the migration commits, as it would have with the
    pragma on. A migration that copies a table others reference calls this at its end, on
    SQLite, inside its own transaction (Alembic commits each revision on SQLite)."""
    violations = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if violations:
        raise RuntimeError(f"the migration left rows that break a foreign key: {violations[:10]}")


# The oldest schema this code works on (docs/migrations.md, "Which code runs on which schema"):
# from here to head it reads and writes correctly, so a rolling deploy can run the migrations
# of an expand/backfill/contract chain while processes of this release serve. 0011: this
# release's worker job and /metrics read the invariant tables of 0011, and its PostgreSQL
# transfer path needs 0010's balance limit in `paycore_create_transfer`; its /metrics and
# worker read reconciliation's tables, and its reconciliation writes 0014's (0013's code was
# wrong to declare 0012: its /metrics read 0013's tables). 0015: every state change writes
# its published event's sequence and snapshot, and fans out into the webhook tables. 0016:
# every tenant's settings are read with 0016's manual window. 0018: reconciliation marks a run
# whose lease lapsed `abandoned`, which 0017's CHECK refuses. 0019: a ledger batch on
# PostgreSQL is one call of 0019's `paycore_create_batch`. 0023: every transfer a flow writes
# carries its owner, and every account its `system` flag (0021; 0024 only adds the triggers),
# every status change of a payment, refund or payout writes 0022's `fault_code` and
# `faulted_at_us`, and the console's sign-in counts failures in 0023's `operator_sign_in_counts`.
# 0033: every payment is stored with 0033's capture columns (SPEC §6.1; the release before runs
# at 0033 unchanged: the columns have defaults and it writes none of them). 0035: every payment
# is stored with its `disputed_minor`, which the refund ceiling reads (SPEC §6.2), and disputes
# are recorded in 0035's table. 0038: a dispute answer whose reply was lost is kept in 0038's
# `dispute_answers_in_flight`, which every recorded dispute clears.
OLDEST_COMPATIBLE_REVISION: Final = "0038"


def is_current(database: Database) -> bool:
    return current_revision(database) == HEAD_REVISION


def schema_state(database: Database) -> str:
    """`current` (at head), `compatible` (between OLDEST_COMPATIBLE_REVISION and head),
    `ahead` (a revision this code does not know: a newer release migrated first), or
    `behind` (too old for this code: run `paycore db upgrade`)."""
    current = current_revision(database)
    if current == HEAD_REVISION:
        return "current"
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    if current == head:
        return "current"
    if current is None:
        return "behind"
    try:
        script.get_revision(current)
    except CommandError:
        return "ahead"
    window = {OLDEST_COMPATIBLE_REVISION}  # iterate_revisions leaves out its lower bound
    window.update(revision.revision for revision in script.iterate_revisions(head, OLDEST_COMPATIBLE_REVISION))
    return "compatible" if current in window else "behind"


def is_usable(database: Database) -> bool:
    """True unless the schema is behind what this code needs."""
    return schema_state(database) != "behind"
