"""On a real Citus coordinator (ADR 0031), only when PAYCORE_TEST_CITUS_URL names one (`.ci/citus`
sets it): the data plane's functions run on the tenant's worker in one call, and the ledger's
triggers and limits are in force there, their errors reaching paycore with their own SQLSTATE,
a deferred trigger's at COMMIT included."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from paycore.config import Settings
from paycore.db import distribute, distribute_functions, loop_calls, migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.payments import capture, settle
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox
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
def heard(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Database, list[str]]]:
    """A Database whose connections ask for Citus's DEBUG1 lines, and the lines they heard: the
    engine's, and the event loop's own that the thin edges call on (`db/loop_calls.py`)."""
    assert CITUS_URL is not None
    database = Database(Settings(database_url=CITUS_URL, secrets_keys=(secrets_keys.KEY,)))
    lines: list[str] = []
    opened = loop_calls._LoopPool._connect

    async def opened_and_listening(pool: Any) -> Any:
        connection = await opened(pool)
        connection.add_notice_handler(lambda diagnostic: lines.append(diagnostic.message_primary or ""))
        await connection.execute("SET client_min_messages TO debug1")  # autocommit: for the session
        return connection

    monkeypatch.setattr(loop_calls._LoopPool, "_connect", opened_and_listening)

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
    assert {
        "paycore_create_transfer",
        "paycore_create_batch",
        "paycore_credits_create",
        "paycore_payments_accept",
        "paycore_inbound_apply_payment",
        "paycore_inbound_return_payout",
        "paycore_inbound_settle_waiting_payout",
        "paycore_inbound_refuse_payout_return",
        "paycore_inbound_return_sent_payout",
        "paycore_inbound_return_waiting_payout",
        "paycore_payout_return",
        "paycore_payout_post",
        "paycore_payout_adjust",
    } <= names
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


def test_a_keyed_batch_runs_on_the_tenants_worker_in_one_call(heard: tuple[Database, list[str]]) -> None:
    """Migration 0050: the batch's key, rows and answer in one call, pushed down whole; its
    replay and a refusal (the claim taken back on the worker) answered as on one PostgreSQL."""
    database, lines = heard
    with TestClient(create_app(database.settings, database)) as client:
        books = _books(client)
        assert _move(client, books["cash"], books["wallet"], 500).status_code == 201  # the facts cached
        move = {"debit_account_id": books["wallet"], "credit_account_id": books["cash"], "currency": "USD"}
        batch = {"transfers": [{**move, "amount_minor": 100}] * 3}
        key = {"Idempotency-Key": f"batch-{secrets.token_hex(6)}"}
        lines.clear()
        made = client.post("/v1/transfers/batch", headers=key, json=batch)
        assert made.status_code == 201, made.text
        assert lines.count(PUSHED_DOWN) == 1, lines  # paycore_create_batch with its key, whole, on the worker
        replayed = client.post("/v1/transfers/batch", headers=key, json=batch)
        assert (replayed.status_code, replayed.json()) == (201, made.json())
        over = {"transfers": [{**move, "amount_minor": 100}] * 3}  # 200 left: the third is refused
        refused = client.post(
            "/v1/transfers/batch", headers={"Idempotency-Key": f"over-{secrets.token_hex(6)}"}, json=over
        )
        assert refused.status_code == 422, refused.text
        assert (refused.json()["error"], refused.json()["param"]) == ("insufficient_funds", "transfers[2].entries")
        assert client.get(f"/v1/accounts/{books['wallet']}/balance").json()["posted_minor"] == 200


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


def _answers(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    """What `module.name` (a data-plane phase) answered, None where it left the work to the
    reference path (a call the worker refused with 0A000 answers None)."""
    found: list[Any] = []
    real: Callable[..., Any] = getattr(module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        found.append(real(*args, **kwargs))
        return found[-1]

    monkeypatch.setattr(module, name, spy)
    return found


def test_a_payments_settle_capture_and_cancel_run_on_the_tenants_worker_in_one_call(
    citus: Database, heard: tuple[Database, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each phase's state event numbered in a form the worker runs (INSERT ... SELECT): settled,
    begun and finished by the delegated call, never handed back to the reference path."""
    database, lines = heard
    settled = _answers(monkeypatch, settle, "settle")
    begun, finished = _answers(monkeypatch, capture, "begin"), _answers(monkeypatch, capture, "finish")
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 'sandbox.db'}")
    processor = InProcessTransport(sandbox, timeout_ms=2_000)
    try:
        with TestClient(create_app(database.settings, database, processor)) as client:
            destination = _books(client)["wallet"]

            def pay(capture_method: str) -> dict[str, Any]:
                answer = client.post(
                    "/v1/payments",
                    headers={"Idempotency-Key": f"pay-{secrets.token_hex(6)}"},
                    json={
                        "amount_minor": 2500,
                        "currency": "USD",
                        "source": {"type": "card", "token": "tok_ok"},
                        "destination_account": destination,
                        "capture": capture_method,
                    },
                )
                assert answer.status_code == 201, answer.text
                return dict(answer.json())

            assert pay("automatic")["status"] == "succeeded"
            assert len(settled) == 1 and settled[0] is not None, settled
            for operation, done in (("capture", "succeeded"), ("cancel", "canceled")):
                payment = pay("manual")
                assert payment["status"] == "requires_capture", payment
                lines.clear()
                answer = client.post(
                    f"/v1/payments/{payment['id']}/{operation}",
                    json={},
                    headers={"Idempotency-Key": f"{operation}-{secrets.token_hex(6)}"},
                )
                assert answer.status_code == 200 and answer.json()["status"] == done, answer.text
                assert lines.count(PUSHED_DOWN) == 2, lines  # begin and finish, each whole on the worker
            assert len(begun) == len(finished) == 2 and None not in begun + finished, (begun, finished)
    finally:
        sandbox.close()


@pytest.fixture
def remote() -> Iterator[tuple[Database, list[str]]]:
    """A Database whose connections log the commands Citus sends to the workers, and the
    details of those lines ("on server postgres@HOST:PORT connectionId: N")."""
    assert CITUS_URL is not None
    database = Database(Settings(database_url=CITUS_URL, secrets_keys=(secrets_keys.KEY,)))
    details: list[str] = []

    @event.listens_for(database.engine, "connect")
    def _listen(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.add_notice_handler(lambda diagnostic: details.append(diagnostic.message_detail or ""))
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET citus.log_remote_commands TO on")
        dbapi_connection.commit()

    yield database, details
    database.dispose()


def test_a_read_of_every_shard_reuses_one_cached_connection_per_worker(
    citus: Database, remote: tuple[Database, list[str]]
) -> None:
    """paycore's sessions read a distributed table's shards on a worker one after another on the
    connection the session keeps for it, instead of opening up to 16 more and closing them at
    the end of each statement (engines.CITUS_EXECUTOR_POOL_SIZE)."""
    database, details = remote
    connections: dict[str, set[str]] = {}
    for _ in range(3):
        details.clear()
        with database.read() as connection:
            assert connection.exec_driver_sql("SHOW citus.max_adaptive_executor_pool_size").scalar_one() == "1"
            connection.exec_driver_sql("SELECT count(*) FROM events WHERE created_at_us >= 0").scalar_one()
        assert details, "Citus logged no remote command: the read did not reach the workers"
        for line in details:
            if " connectionId: " in line:
                server, _, number = line.rpartition(" connectionId: ")
                connections.setdefault(server, set()).add(number)
    assert len(connections) >= 2, connections  # both workers read
    assert all(len(numbers) == 1 for numbers in connections.values()), connections


def test_a_delegated_calls_lock_wait_is_bounded_by_paycores_wait(citus: Database) -> None:
    """The worker runs the call in its own session, which paycore's lock_timeout does not reach:
    `paycore db distribute` gives each function its own (distribute_functions). A transfer whose
    account another transaction holds on the worker is answered busy after one such wait, not
    at statement_timeout (30 s)."""
    assert CITUS_URL is not None
    wait_ms = 1_000
    short = Database(Settings(database_url=CITUS_URL, secrets_keys=(secrets_keys.KEY,), idempotency_wait_ms=wait_ms))
    try:
        lines: list[str] = []
        distribute.distribute(short, lines.append)
        with short.read() as connection:
            functions = distribute_functions.read_functions(connection)
            on_workers = connection.execute(
                text(
                    "SELECT result FROM run_command_on_workers($$SELECT count(*) FROM pg_proc"
                    f" WHERE proname LIKE 'paycore\\_%' AND 'lock_timeout={wait_ms}' = ANY(proconfig)$$)"
                )
            ).scalars()
            counts = [int(count) for count in on_workers]
        assert {function.lock_timeout for function in functions} == {str(wait_ms)}, functions
        assert counts == [len(functions)] * 2, (counts, len(functions))  # propagated to both workers
        with TestClient(create_app(short.settings, short)) as client:
            books = _books(client)
            assert _move(client, books["cash"], books["wallet"], 900).status_code == 201
            with citus.read() as connection:
                owner = connection.execute(
                    text("SELECT tenant_id FROM ledger_accounts WHERE id = :id"), {"id": books["wallet"]}
                ).scalar_one()
            with citus.engine.connect() as blocker, blocker.begin():
                blocker.execute(  # routed to the tenant's worker: the lock is held there
                    text("SELECT 1 FROM ledger_accounts WHERE tenant_id = :t AND id = :id FOR UPDATE"),
                    {"t": owner, "id": books["wallet"]},
                )
                started = time.monotonic()
                busy = _move(client, books["wallet"], books["cash"], 100)
                waited_s = time.monotonic() - started
        assert busy.status_code == 503, busy.text
        assert wait_ms / 1000 <= waited_s < 3 * wait_ms / 1000, waited_s
    finally:
        distribute.distribute(citus, lambda _line: None)  # the module's bound back (its settings')
        short.dispose()
