"""A ledger transfer's and a batch's thin edges from the event loop, with no worker thread (ADR 0026
decision 4), on both databases: `ledger/keyed.py`'s `create_transfer_on_loop` and
`ledger/batch_keyed.py`'s `create_batch_on_loop`, and on PostgreSQL the loop's own connections
(`db/loop_calls.py`).

- The plain path (a new key, a well-formed body, accounts the data plane accepts) submits
  nothing to a worker thread, the accounts' facts read on the loop too; the FastAPI route's does,
  and so does PostgreSQL's reference path when the data plane declines (SQLite's runs from the
  loop): the count can fail.
- The same statements as the thread path (the FastAPI route's `keyed.create_transfer` /
  `batch_keyed.create_batch` on a worker thread), the accounts' facts read or cached.
- The same answers and balances as the FastAPI route's, a success and a refusal alike
  (`test_transfers_edge.py` and `test_batch_edge.py` hold every body to it).
- A connection lost during PostgreSQL's call is answered as the thread path answers it (503,
  the commit's outcome unknown), nothing is written, the key's retry writes it once.
- A lock wait past its bound during PostgreSQL's call is answered at once, as on the thread
  (503 `database_busy`, nothing recorded). SQLite's (a duplicate behind its first request: 409)
  is tests/integration/http/test_in_progress.py's, a batch at the edge.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import batches as money_batches
from paycore.http.money import transfers as money_transfers
from paycore.ledger import batch_keyed, keyed
from tests.integration.ledger.test_transfer_data_plane import COMMITS, STATEMENTS
from tests.integration.payments.test_create_on_loop import Blocker
from tests.support import edges
from tests.support.statements import counting

JSON = "application/json"
TRANSFERS, BATCHES = "/v1/transfers", "/v1/transfers/batch"
PATHS = pytest.mark.parametrize("path", [TRANSFERS, BATCHES])
WAIT_MS = 300  # the bound of a lock wait in the lock test (PostgreSQL's lock_timeout)
# Each test's accounts, made in this order; a body names them as @A, @B, ...
ACCOUNTS = {
    "A": {"code": "cash", "currency": "USD", "normal_balance": "debit"},
    "B": {"code": "revenue", "currency": "USD", "normal_balance": "credit"},
    "C": {"code": "other.cash", "currency": "USD", "normal_balance": "debit"},
    "E": {"code": "other.revenue", "currency": "USD", "normal_balance": "credit"},
    "D": {"code": "wallet", "currency": "USD", "normal_balance": "credit", "no_overdraft": True},
}


def body(path: str, debit: str = "@A", credit: str = "@B", amount_minor: int = 300) -> bytes:
    """A transfer, or a batch of two, from `debit` to `credit`."""
    transfer = {"debit_account_id": debit, "credit_account_id": credit, "amount_minor": amount_minor, "currency": "USD"}
    return json.dumps(transfer if path == TRANSFERS else {"transfers": [transfer, transfer]}).encode()


@pytest.fixture
def client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database)) as made:
        yield made


@pytest.fixture
def accounts(client: TestClient) -> dict[bytes, bytes]:
    return edges.make_accounts(client, ACCOUNTS)


def post(client: TestClient, accounts: dict[bytes, bytes], path: str, sent: bytes, key: str) -> tuple[Any, ...]:
    return edges.post(client, accounts, path, sent, key, JSON)


def through_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the edges hand every transfer and batch to the FastAPI route: the thread path."""
    monkeypatch.setattr(money_transfers, "read_transfer", lambda content_type, body: None)
    monkeypatch.setattr(money_batches, "read_batch", lambda content_type, body: None)


@PATHS
def test_a_plain_transfer_or_batch_takes_no_worker_thread(
    client: TestClient, accounts: dict[bytes, bytes], submitted: list[str], path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert post(client, accounts, path, body(path), "warm")[0] == 201  # the pools warm, @A and @B known
    submitted.clear()
    sent = [body(path, credit="@E"), body(path), body(path, debit="@C", credit="@E")]  # @C and @E read first
    for index, one in enumerate(sent):
        status, _, answer = post(client, accounts, path, one, f"plain-{index}")
        assert status == 201, answer
    assert submitted == []
    through_the_route(monkeypatch)  # the count can fail: the FastAPI route's sync endpoint
    assert post(client, accounts, path, body(path), "route")[0] == 201
    assert submitted == ["authenticate", "_run_sync_endpoint"], submitted


@PATHS
def test_a_declined_request_takes_one_worker_thread_on_postgresql_only(
    client: TestClient, accounts: dict[bytes, bytes], database: Database, submitted: list[str], path: str
) -> None:
    assert post(client, accounts, path, body(path), "warm")[0] == 201
    submitted.clear()
    status, _, answer = post(client, accounts, path, body(path, debit="@D", amount_minor=10**6), "refused")
    assert status == 422 and json.loads(answer)["error"] == "insufficient_funds", answer
    # The data plane commits only a success: the reference path decides and records the refusal,
    # on PostgreSQL on one worker thread, on SQLite from the loop (the writer's group).
    assert the_edges(submitted) == (["run"] if database.is_postgres else [])
    submitted.clear()
    replayed = post(client, accounts, path, body(path, debit="@D", amount_minor=10**6), "refused")
    assert replayed[0] == 422 and replayed[1]["idempotent-replayed"] == "true", replayed
    assert the_edges(submitted) == (["run"] if database.is_postgres else [])


def the_edges(submitted: list[str]) -> list[str]:
    """What the edge handed to a worker thread: the refusal audit's record of a first 4xx
    (`http/refusals.record`, around every route, after the answer) left out."""
    return [name for name in submitted if name != "record"]


def counted(real: Callable[..., Any], found: list[list[str]], database: Database, on_loop: bool) -> Callable[..., Any]:
    """`real` (a write of `keyed` or `batch_keyed`), its statements appended to `found`."""
    if not on_loop:

        def run(*args: Any, **kwargs: Any) -> Any:
            with counting(database) as statements:
                answer = real(*args, **kwargs)
            found.append(statements)
            return answer

        return run

    async def run_on_loop(*args: Any, **kwargs: Any) -> Any:
        with counting(database) as statements:
            answer = await real(*args, **kwargs)
        found.append(statements)
        return answer

    return run_on_loop


@PATHS
def test_each_write_from_the_loop_costs_what_it_costs_on_a_thread(
    client: TestClient,
    accounts: dict[bytes, bytes],
    database: Database,
    submitted: list[str],
    path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module: Any = keyed if path == TRANSFERS else batch_keyed
    name = "create_transfer" if path == TRANSFERS else "create_batch"
    found: dict[str, list[list[str]]] = {"loop": [], "thread": []}
    for way, attribute in (("loop", f"{name}_on_loop"), ("thread", name)):
        monkeypatch.setattr(module, attribute, counted(getattr(module, attribute), found[way], database, way == "loop"))
    answers = {}
    for way, (debit, credit) in (("loop", ("@A", "@B")), ("thread", ("@C", "@E"))):
        if way == "thread":
            through_the_route(monkeypatch)
        submitted.clear()
        # The first reads the accounts' facts, the second finds them cached.
        answers[way] = [post(client, accounts, path, body(path, debit, credit), f"{way}-{n}") for n in (1, 2)]
        assert all(status == 201 for status, *_ in answers[way]), answers[way]
        assert (submitted == []) is (way == "loop"), submitted
    assert len(found["loop"]) == len(found["thread"]) == 2
    assert found["loop"] == found["thread"], found
    dialect = database.engine.dialect.name
    read_then_written, written = found["loop"]
    if path == TRANSFERS:
        run = [sql for sql in written if sql != "COMMIT"]
        assert (len(run), written.count("COMMIT")) == (STATEMENTS[dialect], COMMITS[dialect]), written
    facts = "SELECT tenant_id, id, code,"
    assert read_then_written[0].startswith(facts if dialect == "postgresql" else "BEGIN"), read_then_written
    assert not any(sql.startswith(facts) for sql in written), written
    if dialect == "postgresql":
        assert read_then_written[1:] == written and len(written) == 1 and "paycore_create_" in written[0], written
    # The same answers, but for the accounts' ids and the times (masked).
    assert [(status, answer) for status, _, answer in answers["loop"]] == [
        (status, answer) for status, _, answer in answers["thread"]
    ]


@PATHS
def test_the_answers_and_balances_are_the_fastapi_routes(
    client: TestClient, accounts: dict[bytes, bytes], path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def requests(debit: str, credit: str, prefix: str) -> list[tuple[Any, ...]]:
        cases = [
            (body(path, debit, credit, 250), "ok"),
            (body(path, debit, credit, 250), "ok"),  # its replay
            (body(path, debit, credit, 99), "ok"),  # the key reused with another body: 409
            (body(path, "@D", credit, 10**6), "funds"),  # refused: recorded
            (body(path, "@D", credit, 10**6), "funds"),  # its replay
        ]
        return [post(client, accounts, path, sent, f"{prefix}-{key}") for sent, key in cases]

    def balances(*names: bytes) -> list[Any]:
        return [client.get(f"/v1/accounts/{accounts[name].decode()}/balance").json() for name in names]

    on_loop = requests("@A", "@B", "loop")
    through_the_route(monkeypatch)
    on_thread = requests("@C", "@E", "thread")
    assert [answer[0] for answer in on_loop] == [201, 201, 409, 422, 422], on_loop
    assert on_loop == on_thread  # status, headers and body; the ids and times masked
    for loop_balance, thread_balance in zip(balances(b"@A", b"@B"), balances(b"@C", b"@E"), strict=True):
        assert {**loop_balance, "account_id": ""} == {**thread_balance, "account_id": ""}


# ------------------------------------------------------------------ a connection lost mid-call
def keys_of(database: Database, idempotency_key: str) -> int:
    with database.read() as connection:
        return int(
            connection.execute(
                text("SELECT count(*) FROM idempotency_keys WHERE key = :k"), {"k": idempotency_key}
            ).scalar_one()
        )


@pytest.mark.postgres
class LedgerBlocker(Blocker):
    """`Blocker`, ending a transfer's or a batch's call (`paycore_create_transfer`, `paycore_create_batch`)."""

    CALLS = "paycore_create_"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("way", ["loop", "thread"])
@PATHS
def test_a_connection_lost_during_the_call_is_answered_as_on_the_thread(
    client: TestClient,
    accounts: dict[bytes, bytes],
    database: Database,
    path: str,
    way: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert post(client, accounts, path, body(path), "warm")[0] == 201  # the facts cached: the call alone
    if way == "thread":
        through_the_route(monkeypatch)
    blocker = LedgerBlocker(database, accounts[b"@B"].decode())
    blocker.hold()
    try:
        status, _, answer = post(client, accounts, path, body(path), "lost")
    finally:
        blocker.release()
    assert len(blocker.ended) == 1, "the call was waiting on the lock, and was ended"
    assert status == 503, answer
    error = json.loads(answer)
    assert error["error"] == "database_unavailable" and error["commit_outcome"] == "unknown", error
    assert keys_of(database, "lost") == 0, "the call was rolled back with its backend"
    retried = post(client, accounts, path, body(path), "lost")
    assert retried[0] == 201 and "idempotent-replayed" not in retried[1], retried
    assert keys_of(database, "lost") == 1
    posted = client.get(f"/v1/accounts/{accounts[b'@B'].decode()}/balance").json()["posted_minor"]
    assert posted == 2 * (300 if path == TRANSFERS else 600), "the warm-up and the retry, once each"
    assert post(client, accounts, path, body(path), "next")[0] == 201, "the next one on a new connection"


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@PATHS
def test_a_lock_wait_past_its_bound_is_answered_at_once_as_on_the_thread(
    settings: Settings, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bounded = dataclasses.replace(settings, idempotency_wait_ms=WAIT_MS)  # PostgreSQL's lock_timeout too
    database = Database(bounded)
    try:
        with TestClient(create_app(bounded, database)) as client:
            made = edges.make_accounts(client, ACCOUNTS)
            assert post(client, made, path, body(path), "warm")[0] == 201
            answers = []
            for way in ("loop", "thread"):
                if way == "thread":
                    through_the_route(monkeypatch)
                with held_row_lock(database, made[b"@B"].decode()):
                    started_s = time.monotonic()
                    answers.append(post(client, made, path, body(path), f"busy-{way}"))
                    waited_s = time.monotonic() - started_s
                assert waited_s < 10 * WAIT_MS / 1000, "answered once the call's one wait passed its bound"
                assert post(client, made, path, body(path), f"busy-{way}")[0] == 201, "nothing recorded: it runs"
    finally:
        database.dispose()
    assert answers[0] == answers[1], answers
    status, headers, answer = answers[0]
    assert (status, json.loads(answer)["error"], headers.get("retry-after")) == (503, "database_busy", "1"), answers


@contextmanager
def held_row_lock(database: Database, account_id: str) -> Iterator[None]:
    """The account's row locked by a transaction of its own until the block ends."""
    url = database.settings.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url) as holder:
        holder.execute("SELECT 1 FROM ledger_accounts WHERE id = %s FOR UPDATE", (account_id,))
        try:
            yield
        finally:
            holder.rollback()
