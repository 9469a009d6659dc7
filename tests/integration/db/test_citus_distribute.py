"""`paycore db distribute` on a real Citus coordinator (ADR 0031), only when
PAYCORE_TEST_CITUS_URL names one (`sudo scripts/citus up` prints such a URL): the migrations,
then every tenant table distributed by tenant_id in one colocation group and the global tables
as reference tables; a second run does nothing; a later migration's DDL still runs; a credit
and a ledger transfer go through the API and the books verify."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from typer.testing import CliRunner

from paycore.cli.main import app as cli
from paycore.config import Settings
from paycore.db import distribute, migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from tests.support import citus_shared, secrets_keys

CITUS_URL = os.environ.get("PAYCORE_TEST_CITUS_URL")
pytestmark = [
    pytest.mark.citus,
    pytest.mark.skipif(
        not CITUS_URL, reason="PAYCORE_TEST_CITUS_URL is not set: no Citus coordinator to distribute on (scripts/citus)"
    ),
]


@pytest.fixture
def citus() -> Iterator[Database]:
    assert CITUS_URL is not None
    patch = pytest.MonkeyPatch()
    patch.setenv("PAYCORE_DATABASE_URL", CITUS_URL)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level  # the CLI logs to its (captured) stderr
    database = Database(Settings(database_url=CITUS_URL, secrets_keys=(secrets_keys.KEY,)))
    try:
        with citus_shared.held(CITUS_URL):
            yield database
    finally:
        database.dispose()
        root.handlers[:], root.level = handlers, level
        patch.undo()


def _cli(*arguments: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(arguments))
    return result.exit_code, " ".join(result.output.split())


def test_distribute_places_every_table_once_and_paycore_keeps_working(citus: Database) -> None:
    migrate.upgrade(citus)
    exit_code, output = _cli("db", "distribute")
    assert exit_code == 0, output
    again_code, again = _cli("db", "distribute")
    assert again_code == 0 and "nothing to do" in again, again
    with citus.read() as connection:
        rows = connection.execute(text("SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition"))
        placed = {str(table): str(method) for table, method in rows}
        groups = connection.execute(
            text("SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE partmethod = 'h'")
        ).scalar_one()
        catalogue = distribute.read_catalogue(connection)
    assert distribute.plan(catalogue) == []
    assert {t for t, m in placed.items() if m == "n"} == set(distribute.REFERENCE_TABLES)
    distributed = {t for t, m in placed.items() if m == "h"}
    assert {"payments", "refunds", "payouts", "ledger_entries", "ledger_transfers", "events"} <= distributed
    assert distributed | set(distribute.REFERENCE_TABLES) | set(distribute.COORDINATOR_TABLES) == set(catalogue.tables)
    assert groups == 1  # every distributed table colocated
    _a_later_migration_still_runs(citus)
    _money_moves_and_the_books_verify(citus)


def _a_later_migration_still_runs(citus: Database) -> None:
    """What a migration does next (a column, an index, a function, a trigger, the version row),
    in one transaction in the session `migrate.run` prepares on Citus; rolled back."""
    with citus.engine.connect() as connection:
        assert distribute.is_citus(connection)
        distribute.set_migration_settings(connection, on=True)
        connection.execute(text("ALTER TABLE payments ADD COLUMN probe_minor bigint"))
        connection.execute(text("CREATE INDEX ix_payments_probe ON payments (tenant_id, probe_minor)"))
        connection.execute(
            text("CREATE FUNCTION paycore_probe() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$")
        )
        connection.execute(
            text(
                "CREATE TRIGGER payments_probe BEFORE INSERT ON payments FOR EACH ROW EXECUTE FUNCTION paycore_probe()"
            )
        )
        connection.execute(text("UPDATE alembic_version SET version_num = version_num"))
        connection.rollback()
        distribute.set_migration_settings(connection, on=False)
        connection.commit()
    assert migrate.current_revision(citus) == migrate.HEAD_REVISION


def _money_moves_and_the_books_verify(citus: Database) -> None:
    with TestClient(create_app(citus.settings, citus)) as client:
        made = client.post(
            "/v1/tenants/globex/credits",
            json={
                "idempotency_key": f"grant-{os.getpid()}",
                "lines": [{"desc": "starter pack", "amount_minor": 500, "currency": "USD"}],
            },
        )
        assert made.status_code == 201, made.text
        suffix = os.urandom(4).hex()
        accounts = [
            client.post(
                "/v1/accounts", json={"code": f"{code}.{suffix}", "currency": "USD", "normal_balance": side}
            ).json()["id"]
            for code, side in (("clearing", "debit"), ("merchant", "credit"))
        ]
        moved = client.post(
            "/v1/transfers",
            headers={"Idempotency-Key": f"fund-{suffix}"},
            json={
                "debit_account_id": accounts[0],
                "credit_account_id": accounts[1],
                "amount_minor": 10000,
                "currency": "USD",
            },
        )
        assert moved.status_code == 201, moved.text
        balance = client.get(f"/v1/accounts/{accounts[1]}/balance").json()
        assert balance["posted_minor"] == 10000
    exit_code, output = _cli("ledger", "verify")
    assert exit_code == 0 and "ledger verified" in output, output
