"""On a real Citus coordinator (ADR 0031), only when PAYCORE_TEST_CITUS_URL names one (`.ci/citus`
sets it): the data plane's functions run on the tenant's worker in one call, and the ledger's
triggers and limits are in force there, their errors reaching paycore with their own SQLSTATE,
a deferred trigger's at COMMIT included."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from paycore.config import Settings
from paycore.db import distribute, distribute_functions, migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from tests.support import citus_shared, secrets_keys

CITUS_URL = os.environ.get("PAYCORE_TEST_CITUS_URL")
pytestmark = [
    pytest.mark.citus,
    pytest.mark.skipif(
        not CITUS_URL, reason="PAYCORE_TEST_CITUS_URL is not set: no Citus coordinator (scripts/citus, .ci/citus)"
    ),
]
PUSHED_DOWN = "pushing down the function call"  # Citus's DEBUG1 line for a delegated call


@pytest.fixture(scope="module")
def citus() -> Iterator[Database]:
    assert CITUS_URL is not None
    database = Database(Settings(database_url=CITUS_URL, secrets_keys=(secrets_keys.KEY,)))
    with citus_shared.held(CITUS_URL):
        migrate.upgrade(database)
        distribute.distribute(database, lambda _line: None)
        yield database
    database.dispose()


@pytest.fixture
def heard() -> Iterator[tuple[Database, list[str]]]:
    """A Database whose connections ask for Citus's DEBUG1 lines, and the lines they heard."""
    assert CITUS_URL is not None
    database = Database(Settings(database_url=CITUS_URL, secrets_keys=(secrets_keys.KEY,)))
    lines: list[str] = []

    @event.listens_for(database.engine, "connect")
    def _listen(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.add_notice_handler(lambda diagnostic: lines.append(diagnostic.message_primary or ""))
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET client_min_messages TO debug1")
        dbapi_connection.commit()

    yield database, lines
    database.dispose()


def _books(client: TestClient) -> dict[str, str]:
    suffix = secrets.token_hex(4)
    made = {}
    for code, side, guarded in (("cash", "debit", False), ("wallet", "credit", True)):
        answer = client.post(
            "/v1/accounts",
            json={"code": f"{code}.{suffix}", "currency": "USD", "normal_balance": side, "no_overdraft": guarded},
        )
        assert answer.status_code == 201, answer.text
        made[code] = answer.json()["id"]
    return made


def _move(client: TestClient, debit: str, credit: str, amount_minor: int) -> Any:
    return client.post(
        "/v1/transfers",
        headers={"Idempotency-Key": f"move-{secrets.token_hex(6)}"},
        json={"debit_account_id": debit, "credit_account_id": credit, "amount_minor": amount_minor, "currency": "USD"},
    )


def test_every_server_function_is_delegated_by_its_tenant(citus: Database) -> None:
    with citus.read() as connection:
        functions = distribute_functions.read_functions(connection)
        colocated = connection.execute(
            text(
                "SELECT count(*) FROM pg_dist_object d WHERE d.classid = 'pg_proc'::regclass"
                " AND d.colocationid = (SELECT colocationid FROM pg_dist_partition"
                " WHERE logicalrelid = 'payments'::regclass)"
            )
        ).scalar_one()
    names = {function.signature.split("(")[0] for function in functions}
    expected = {"paycore_create_transfer", "paycore_create_batch", "paycore_credits_create", "paycore_payments_accept"}
    assert expected <= names
    assert all(function.delegated for function in functions), functions
    assert colocated == len(functions)


def test_a_transfer_and_a_credit_run_on_the_tenants_worker_in_one_call(heard: tuple[Database, list[str]]) -> None:
    database, lines = heard
    with TestClient(create_app(database.settings, database)) as client:
        books = _books(client)
        lines.clear()
        moved = _move(client, books["cash"], books["wallet"], 700)
        assert moved.status_code == 201, moved.text
        assert lines.count(PUSHED_DOWN) == 1, lines  # paycore_create_transfer, whole, on the worker
        lines.clear()
        credited = client.post(
            "/v1/tenants/globex/credits",
            json={
                "idempotency_key": f"grant-{secrets.token_hex(6)}",
                "lines": [{"desc": "pack", "amount_minor": 300, "currency": "USD"}],
            },
        )
        assert credited.status_code == 201, credited.text
        assert PUSHED_DOWN in lines, lines


def test_a_limit_refused_on_the_worker_is_answered_as_on_one_postgresql(citus: Database) -> None:
    with TestClient(create_app(citus.settings, citus)) as client:
        books = _books(client)
        refused = _move(client, books["wallet"], books["cash"], 1)  # the guarded wallet holds nothing
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == "insufficient_funds", refused.text
        balance = client.get(f"/v1/accounts/{books['wallet']}/balance").json()
        assert balance["posted_minor"] == 0


def test_ledger_entries_stay_append_only_on_the_worker(citus: Database) -> None:
    with TestClient(create_app(citus.settings, citus)) as client:
        books = _books(client)
        assert _move(client, books["cash"], books["wallet"], 500).status_code == 201
    with citus.read() as connection:
        tenant, port = connection.execute(
            text(
                "SELECT e.tenant_id, s.nodeport FROM ledger_entries e JOIN citus_shards s"
                " ON s.shardid = get_shard_id_for_distribution_column('ledger_entries', e.tenant_id)"
                " WHERE e.account_id = :account LIMIT 1"
            ),
            {"account": books["wallet"]},
        ).one()
    coordinator_port = int(str(CITUS_URL).rsplit(":", 1)[1].split("/")[0])
    assert port != coordinator_port  # the shard, and the trigger that refuses, are on a worker
    for change in ("UPDATE ledger_entries SET amount_minor = 1", "DELETE FROM ledger_entries"):
        with pytest.raises(DBAPIError) as refused, citus.engine.begin() as connection:
            connection.execute(
                text(f"{change} WHERE tenant_id = :t AND account_id = :a"), {"t": tenant, "a": books["wallet"]}
            )
        assert getattr(refused.value.orig, "sqlstate", None) == "23001", refused.value  # restrict_violation
        assert "append-only" in str(refused.value)


def test_a_deferred_trigger_refusing_at_commit_keeps_its_own_sqlstate(citus: Database) -> None:
    """The ledger's balance check runs at COMMIT on the worker; Citus reports it as XX000 unless
    paycore gives the worker's error back (paycore.db.commit_errors)."""
    tenant = f"t_{secrets.token_hex(4)}"
    with TestClient(create_app(citus.settings, citus)) as client:
        account = _books(client)["cash"]
    with citus.read() as connection:
        owner = connection.execute(
            text("SELECT tenant_id FROM ledger_accounts WHERE id = :id"), {"id": account}
        ).scalar_one()
    with pytest.raises(IntegrityError) as refused, citus.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO ledger_transfers (tenant_id, id, kind, reference_type, metadata, created_at_us)"
                " VALUES (:t, :id, 'transfer', 'adjustment', '{}', 1)"
            ),
            {"t": owner, "id": f"txn_{tenant}"},
        )
        connection.execute(
            text(
                "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor,"
                " currency, account_sequence, created_at_us) VALUES (:t, :id, :txn, :a, 'debit', 5, 'USD', 999999, 1)"
            ),
            {"t": owner, "id": f"ent_{tenant}", "txn": f"txn_{tenant}", "a": account},
        )
    assert getattr(refused.value.orig, "sqlstate", None) == "23514", refused.value  # check_violation
    assert "does not balance" in str(refused.value)
    with citus.read() as connection:
        written = connection.execute(
            text("SELECT count(*) FROM ledger_transfers WHERE id = :id"), {"id": f"txn_{tenant}"}
        )
        assert written.scalar_one() == 0
