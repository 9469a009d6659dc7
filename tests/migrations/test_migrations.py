"""The migrations are the schema: `upgrade head` on an empty database gives exactly what the
code declares, on SQLite and PostgreSQL, and the database itself keeps the ledger append-only."""

from __future__ import annotations

import itertools
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from psycopg import sql
from sqlalchemy import Connection, inspect, text
from sqlalchemy.exc import DBAPIError

from paycore.audit import service as audit
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.tables import metadata
from tests.support import databases

APPEND_ONLY_TABLES = ("ledger_entries", "ledger_transfers", "events", "payout_adjustments")


@pytest.fixture
def empty_database(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Database]:
    """A database with no tables at all (not the migrated template the other tests copy)."""
    if backend == "sqlite":
        database = Database(Settings(database_url=f"sqlite:///{tmp_path / 'empty.db'}"))
        yield database
        database.dispose()
        return
    request.getfixturevalue("postgres_databases")  # skips or fails loudly without a server
    name = f"{databases.RUN_ID}_empty_{secrets.token_hex(3)}"
    databases._admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    database = Database(Settings(database_url=databases.sqlalchemy_url(name), db_pool_size=2))
    try:
        yield database
    finally:
        database.dispose()
        databases.PostgresDatabases.drop(name)


def schema_differences(database: Database) -> list[object]:
    with database.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))


def table_names(database: Database) -> set[str]:
    with database.engine.connect() as connection:
        return set(inspect(connection).get_table_names()) - {"alembic_version"}


def test_upgrade_of_an_empty_database_equals_the_declared_schema(empty_database: Database) -> None:
    assert table_names(empty_database) == set()
    migrate.upgrade(empty_database)
    assert migrate.is_current(empty_database)
    assert table_names(empty_database) == set(metadata.tables)
    assert schema_differences(empty_database) == []


def test_upgrade_is_repeatable_and_downgrade_undoes_it(empty_database: Database) -> None:
    migrate.upgrade(empty_database)
    migrate.upgrade(empty_database)  # already at head: nothing to do, no error
    migrate.downgrade(empty_database, "base")
    assert table_names(empty_database) == set()
    migrate.upgrade(empty_database)
    assert schema_differences(empty_database) == []


def test_foreign_keys_hold_after_a_migration(empty_database: Database) -> None:
    """SQLite migrates with foreign keys off (paycore.db.migrate): they are on again after."""
    migrate.upgrade(empty_database)
    for _ in range(2):  # the migration's own connection, back in the pool, and the next one
        with pytest.raises(DBAPIError, match=r"(?i)foreign key"), empty_database.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor,"
                    " currency, account_sequence, created_at_us)"
                    " VALUES ('t', 'ent_1', 'txn_missing', 'acc_missing', 'debit', 1, 'USD', 1, 0)"
                )
            )


def test_sqlite_refuses_to_commit_a_migration_that_leaves_a_broken_foreign_key(
    empty_database: Database, backend: str
) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite migrates with foreign keys off; PostgreSQL never turns them off")
    migrate.upgrade(empty_database, "0007")
    orphan = sqlite3.connect(empty_database.engine.url.database or "", isolation_level=None)
    orphan.execute(  # written around paycore, with the keys off: an entry of no transfer
        "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor,"
        " currency, account_sequence, created_at_us)"
        " VALUES ('t', 'ent_1', 'txn_missing', 'acc_missing', 'debit', 1, 'USD', 1, 0)"
    )
    orphan.close()
    migrate.upgrade(empty_database, "0007")  # nothing to migrate: nothing checked
    with pytest.raises(RuntimeError, match="break a foreign key"):
        migrate.upgrade(empty_database)  # 0008 copies the ledger's tables: checked, rolled back
    assert migrate.current_revision(empty_database) == "0007"
    # Left where it was; this release serves only from 0011 (OLDEST_COMPATIBLE_REVISION), so
    # /readyz says so until the orphans are dealt with and the upgrade is run again.
    assert migrate.schema_state(empty_database) == "behind"


def test_the_test_databases_are_at_head(database: Database) -> None:
    assert migrate.current_revision(database) == migrate.head_revision() is not None
    assert schema_differences(database) == []


def test_head_revision_is_the_scripts_head() -> None:
    """A process whose database is at HEAD_REVISION starts without Alembic; a migration added
    without moving HEAD_REVISION would leave databases unmigrated, so it fails here."""
    assert migrate.head_revision() == migrate.HEAD_REVISION


def test_a_database_at_head_is_upgraded_and_checked_without_alembic(tmp_path: Path) -> None:
    """What every start of `paycore serve`, `worker` and the CLI's commands does, in a fresh
    interpreter: at head, neither `upgrade` nor `schema_state` imports Alembic (issue 30: its
    import cost each of the suite's processes ~0.085 s)."""
    url = f"sqlite:///{tmp_path / 'at-head.db'}"
    migrate.upgrade(Database(Settings(database_url=url)))
    script = (
        "import sys\n"
        "from paycore.config import Settings\n"
        "from paycore.db import migrate\n"
        "from paycore.db.engine import Database\n"
        f"database = Database(Settings(database_url={url!r}))\n"
        "migrate.upgrade(database)\n"
        "assert migrate.schema_state(database) == 'current'\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'alembic'))\n"
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr


# ---------------------------------------------------------------------------- append-only


def one_transfer(database: Database) -> str:
    def work(connection: Connection) -> str:
        now = now_us()
        ids = [
            ledger.create_account(
                connection,
                "t",
                code=code,
                currency="USD",
                normal_balance=normal_balance,
                no_overdraft=False,
                metadata={},
                now_us=now,
            ).id
            for code, normal_balance in (("source", "debit"), ("sink", "credit"))
        ]
        spec = TransferSpec(entries=(EntrySpec(ids[0], "debit", 5), EntrySpec(ids[1], "credit", 5)))
        transfer_id = ledger.create_transfer(connection, "t", spec, now_us=now).id
        audit.record_state_change(  # and one audit event: the log is append-only too
            connection,
            "t",
            object_type="payment",
            object_id="pay_1",
            from_state=None,
            to_state="processing",
            cause="test",
            actor="local",
            now_us=now,
        )
        connection.execute(  # and one payout adjustment: append-only like the ledger
            text(
                "INSERT INTO payout_adjustments (tenant_id, id, payout_id, kind, amount_minor, currency,"
                " effective_on, source, dedupe_key, transfer_id, created_at_us)"
                " VALUES ('t', 'adj_1', 'po_1', 'fee', 25, 'USD', '2026-11-29', 'bank', 'bank:fee', :transfer_id, :now)"
            ),
            {"transfer_id": transfer_id, "now": now},
        )
        return transfer_id

    return database.transaction(work)


def count(database: Database, table: str) -> int:
    with database.read() as connection:
        return int(connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())


@pytest.mark.parametrize("table", APPEND_ONLY_TABLES)
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {table} SET created_at_us = created_at_us + 1",
        "UPDATE {table} SET tenant_id = 'other'",
        "DELETE FROM {table}",
        "DELETE FROM {table} WHERE tenant_id = 't'",
    ],
)
def test_triggers_refuse_update_and_delete(database: Database, table: str, statement: str) -> None:
    one_transfer(database)
    before = count(database, table)
    assert before > 0
    with pytest.raises(DBAPIError, match="append-only"), database.engine.connect() as connection, connection.begin():
        connection.execute(text(statement.format(table=table)))
    assert count(database, table) == before


@pytest.mark.parametrize("table", APPEND_ONLY_TABLES)
def test_truncate_is_refused_on_postgres(database: Database, table: str) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite has no TRUNCATE")
    one_transfer(database)
    before = count(database, table)
    with pytest.raises(DBAPIError, match="append-only"), database.engine.connect() as connection, connection.begin():
        connection.execute(text(f"TRUNCATE {table} CASCADE"))
    assert count(database, table) == before


_raw_sequences = itertools.count(1_000_000)  # far above what the service hands out in these tests


def raw_transfer(connection: Connection, transfer_id: str, legs: list[tuple[str, str, int]]) -> None:
    now = now_us()
    connection.execute(
        text(
            "INSERT INTO ledger_transfers (tenant_id, id, kind, reference_type, metadata, created_at_us)"
            " VALUES ('t', :id, 'transfer', 'adjustment', '{}', :now)"
        ),
        {"id": transfer_id, "now": now},
    )
    for index, (account_id, direction, amount_minor) in enumerate(legs):
        connection.execute(
            text(
                "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor,"
                " currency, account_sequence, created_at_us)"
                " VALUES ('t', :id, :transfer_id, :account_id, :direction, :amount, 'USD', :sequence, :now)"
            ),
            {
                "id": f"ent_{transfer_id}_{index}",
                "sequence": next(_raw_sequences),
                "transfer_id": transfer_id,
                "account_id": account_id,
                "direction": direction,
                "amount": amount_minor,
                "now": now,
            },
        )


def test_postgres_refuses_an_unbalanced_transfer_at_commit(database: Database) -> None:
    if not database.is_postgres:
        pytest.skip("the deferred balance trigger is PostgreSQL's")
    one_transfer(database)
    with database.read() as connection:
        source, sink = (row.id for row in connection.execute(text("SELECT id FROM ledger_accounts ORDER BY code")))
    transfers_before = count(database, "ledger_transfers")

    with database.engine.connect() as connection:
        transaction = connection.begin()
        raw_transfer(connection, "txn_raw_unbalanced", [(sink, "debit", 7), (source, "credit", 6)])
        # Deferred: every statement succeeded; the check runs at commit and refuses it whole.
        with pytest.raises(DBAPIError, match="does not balance"):
            transaction.commit()
    assert count(database, "ledger_transfers") == transfers_before

    # The same raw SQL, balanced over three legs, commits.
    with database.engine.connect() as connection, connection.begin():
        raw_transfer(connection, "txn_raw_balanced", [(sink, "debit", 4), (sink, "debit", 3), (source, "credit", 7)])
    assert count(database, "ledger_transfers") == transfers_before + 1
