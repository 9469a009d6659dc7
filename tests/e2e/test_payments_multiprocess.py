"""Payments across real OS processes (SPEC §3.1, §6, §10; ADR 0006): what keeps one key to one
charge, and one in-doubt payment to one resolution, is the database, not a lock in a process.

1. Two `paycore serve` processes on the test's database and the sandbox processor as a third.
   The sandbox holds the first charge's answer for a second (`delay_ms`), and meanwhile
   identical `POST /v1/payments` with one Idempotency-Key arrive at both servers: one request
   executes, every other one replays its answer byte for byte, the processor holds one charge,
   and the money lands once. Then 10 keys sent 3 times each, spread over both servers: one
   payment and one charge per key. Run twice: with the sandbox's webhooks going to the first
   server, so the webhook (usually delivered during the held answer) races the API's own
   step 3, and going nowhere, so the executing API process settles each key itself.

2. 30 payments left `in_doubt` (the processor took them, every answer was lost), then two
   `paycore worker` processes resolve them side by side with small batches and a lease that
   never lapses: each payment leaves `in_doubt` exactly once, by one `get_charge`, the
   declined ones fail, both workers did part of the work, and the books balance. Here the
   webhooks go to a port nobody listens on, so only the resolvers decide.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import pytest
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.processor.http_transport import HttpTransport
from tests.e2e.payments_support import (
    LAUNCH_ATTEMPTS_MAX,
    POLL_S,
    CliProcess,
    SandboxProcess,
    clean_env,
    payment_row,
    wait_for,
)
from tests.e2e.support import (
    SERVER_POOL_SIZE,
    START_TIMEOUT_S,
    Reply,
    account_balance,
    assert_ledger_verifies,
    call,
    free_port,
    run_together,
    server_env,
)

TENANT = "multi"
PROCESSOR_TIMEOUT_MS = 5_000  # far above the held answer: the API always gets one
HELD_MS = 1_000  # the sandbox holds the charge's answer this long, so duplicates overlap it
IDEMPOTENCY_WAIT_MS = 10_000  # ten times the hold: no duplicate gives up (no 409 expected)
SAME_KEY_COPIES = 8
KEYS = 10
COPIES_PER_KEY = 3
IN_DOUBT_COUNT = 30
API_TIMEOUT_MS = 2_000  # the in-process API's call; a dropped answer comes back at once (hold 0)
GET_CHARGE_DELAY_MS = 200  # slows each resolution, so the second worker is up before the first is done
RESOLVER_BATCH_MAX = 3  # small batches: the two workers' claims interleave
LEASE_MS = 60_000  # > RESOLVER_BATCH_MAX * (PROCESSOR_TIMEOUT_MS + delay): no lease lapses here
WAIT_S = 45
PORT_DRAWS_MAX = 10


class Stoppable(Protocol):
    def stop(self) -> None: ...
    def log(self) -> str: ...


@pytest.fixture
def started() -> Iterator[list[tuple[str, Stoppable]]]:
    """(name, process) of everything a test starts; stopped in reverse order at teardown, logs printed."""
    processes: list[tuple[str, Stoppable]] = []
    yield processes
    for _name, process in reversed(processes):
        process.stop()
    for name, process in processes:
        print(f"--- {name}:\n{process.log()}")


# ---------------------------------------------------------------------------- helpers


def payment_body(amount_minor: int, token: str, destination: str) -> dict[str, Any]:
    return {
        "amount_minor": amount_minor,
        "currency": "USD",
        "source": {"type": "card", "token": token},
        "destination_account": destination,
    }


def tenant_call(port: int, method: str, path: str, body: Any = None, key: str | None = None) -> Reply:
    headers = {"Paycore-Tenant": TENANT}
    if key is not None:
        headers["Idempotency-Key"] = key
    return call(port, method, path, body, headers=headers)


def create_merchant(port: int) -> str:
    body = {"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
    reply = tenant_call(port, "POST", "/v1/accounts", body, key="merchant-account")
    assert reply.status == 201, reply
    return str(reply.body["id"])


def balance(port: int, account_id: str) -> tuple[int, int, int]:
    found = account_balance(port, TENANT, account_id)
    return found["posted_minor"], found["pending_minor"], found["available_minor"]


def wait_healthy(process: CliProcess, port: int, deadline: float) -> bool:
    """True once /healthz answers 200; False if the process exited (its port was taken)."""
    while time.monotonic() < deadline:
        if not process.running():
            return False
        try:
            if call(port, "GET", "/healthz", timeout_s=1).status == 200:
                return True
        except OSError:
            pass
        time.sleep(POLL_S)
    raise AssertionError(f"paycore serve not ready within {START_TIMEOUT_S} s:\n{process.log()}")


def free_port_except(taken: set[int]) -> int:
    for _ in range(PORT_DRAWS_MAX):
        port = free_port()
        if port not in taken:
            return port
    raise AssertionError(f"no free port outside {sorted(taken)} in {PORT_DRAWS_MAX} draws")


def launch_api(tmp_path: Path, index: int, port: int, env: dict[str, str]) -> CliProcess:
    server = CliProcess(["serve", "--host", "127.0.0.1", "--port", str(port)], env, tmp_path / f"serve-{index}.log")
    server.launch()
    return server


def start_sandbox_and_two_apis(
    tmp_path: Path, database_url: str, started: list[tuple[str, Stoppable]], *, webhooks_to_api: bool
) -> tuple[SandboxProcess, list[int]]:
    """The sandbox and two `paycore serve` processes. The sandbox's webhooks go to the first
    server (whose port is chosen before the sandbox starts) or to a port nobody listens on.
    If another process takes a server's port before it binds it, everything is started again
    on new ports (bounded); a server that exits for any other reason fails the test at once."""
    exits = ""
    for attempt in range(LAUNCH_ATTEMPTS_MAX):
        first_port = free_port()
        webhook_port = first_port if webhooks_to_api else free_port_except({first_port})
        sandbox = SandboxProcess(
            tmp_path / "sandbox.db", f"http://127.0.0.1:{webhook_port}/v1/webhooks/processor", tmp_path / "sandbox.log"
        )
        started.append((f"sandbox, attempt {attempt + 1}", sandbox))
        sandbox.start()
        # Chosen once the sandbox holds its port, so that no two of the three can be the same.
        ports = [first_port, free_port_except({first_port, sandbox.port, webhook_port})]
        env = server_env(
            database_url,
            PAYCORE_PROCESSOR_URL=sandbox.url,
            PAYCORE_PROCESSOR_TIMEOUT_MS=str(PROCESSOR_TIMEOUT_MS),
            PAYCORE_IDEMPOTENCY_WAIT_MS=str(IDEMPOTENCY_WAIT_MS),
        )
        servers = [launch_api(tmp_path, index, port, env) for index, port in enumerate(ports)]
        started.extend((f"serve {i} (port {ports[i]}), attempt {attempt + 1}", s) for i, s in enumerate(servers))
        deadline = time.monotonic() + START_TIMEOUT_S
        exited = [
            server for server, port in zip(servers, ports, strict=True) if not wait_healthy(server, port, deadline)
        ]
        if not exited and sandbox.port != first_port:
            return sandbox, ports
        exits = "\n".join(f"exit status {s.process.returncode if s.process else None}:\n{s.log()}" for s in exited)
        for server in servers:
            server.stop()
        sandbox.stop()
        if not all("address already in use" in server.log().lower() for server in exited):
            raise AssertionError(f"paycore serve exited before it was ready (not a port conflict):\n{exits}")
    raise AssertionError(f"no sandbox and two API servers in {LAUNCH_ATTEMPTS_MAX} attempts:\n{exits}")


@dataclass(frozen=True)
class Timed:
    reply: Reply
    sent_s: float  # time.monotonic() just before the request was sent
    answered_s: float


def send_payment(port: int, key: str, body: dict[str, Any]) -> Timed:
    sent_s = time.monotonic()
    reply = tenant_call(port, "POST", "/v1/payments", body, key=key)
    return Timed(reply, sent_s, time.monotonic())


def timed_only(results: Sequence[object]) -> list[Timed]:
    failures = [result for result in results if not isinstance(result, Timed)]
    assert not failures, f"{len(failures)} requests failed without a response, e.g. {failures[0]!r}"
    return [result for result in results if isinstance(result, Timed)]


def assert_executed_once(answers: Sequence[Timed], status: int) -> Reply:
    """One answer executed the request (no Idempotent-Replayed header), every other one is a
    replay of it: same status, same body, byte for byte once parsed. Returns the executed one."""
    seen = Counter((a.reply.status, a.reply.error, a.reply.headers.get("idempotent-replayed")) for a in answers)
    executed = [a for a in answers if "idempotent-replayed" not in a.reply.headers]
    assert len(executed) == 1, f"{len(executed)} requests executed: {dict(seen)}"
    first = executed[0]
    for answer in answers:
        assert (answer.reply.status, answer.reply.body) == (status, first.reply.body), (answer.reply, first.reply)
        if answer is not first:
            assert answer.reply.headers["idempotent-replayed"] == "true", answer.reply
    # The duplicates really overlapped the executing request: all were sent before it answered.
    assert max(a.sent_s for a in answers) < first.answered_s, "the duplicates did not overlap the first request"
    return first.reply


def all_payments(port: int) -> list[dict[str, Any]]:
    reply = tenant_call(port, "GET", "/v1/payments?limit=100")
    assert reply.status == 200 and reply.body["has_more"] is False, reply
    return list(reply.body["data"])


def state_changes(port: int, payment_id: str) -> list[tuple[str | None, str, str, str]]:
    reply = tenant_call(port, "GET", f"/v1/payments/{payment_id}")
    assert reply.status == 200, reply
    return [(step["from"], step["to"], step["cause"], step["actor"]) for step in reply.body["history"]]


def processor_calls_over_http(port: int, payment_id: str) -> list[tuple[str, str, str]]:
    reply = tenant_call(port, "GET", f"/v1/payments/{payment_id}/events")
    assert reply.status == 200, reply
    return [(e["type"], e["cause"], e["actor"]) for e in reply.body["data"] if e["kind"] == "processor_call"]


def worker_of(event: dict[str, Any]) -> str:
    """The worker process an event's data names (the actor names its job, `worker:JOB`)."""
    return str(event["data"].get("worker_id", ""))


def assert_charged_once_each(sandbox: SandboxProcess, expected: dict[str, str]) -> None:
    """The processor holds exactly one charge per payment id (its request id), with this status."""
    rows = sandbox.charge_rows()
    assert Counter(row["request_id"] for row in rows) == Counter(list(expected)), rows
    assert {row["request_id"]: row["status"] for row in rows} == expected, rows


def assert_single_resolution(port: int, payment_id: str, status: str) -> None:
    """The payment left `processing` once, to `status`, by the API's answer or the webhook."""
    steps = state_changes(port, payment_id)
    assert [step[:2] for step in steps] == [(None, "processing"), ("processing", status)], steps
    assert steps[1][2] in ("processor_answer", "webhook"), steps
    calls = processor_calls_over_http(port, payment_id)
    assert calls == [("processor.charge", "answered", "local")], calls  # the duplicates called nobody


def send_keys_at_once(ports: Sequence[int], merchant_id: str) -> tuple[dict[str, str], int]:
    """KEYS keys sent COPIES_PER_KEY times each, all at once, each key's copies spread over both
    processes; every fifth key is declined (a 402 is replayed like a 201). Checks that each key
    executed once; returns {payment id: final status} and the amount of the succeeded ones."""
    amounts = {f"key-{k}": 2000 + 11 * k for k in range(KEYS)}
    tokens = {key: "tok_declined" if k % 5 == 4 else "tok_ok" for k, key in enumerate(amounts)}
    keys = list(amounts)

    def send(index: int) -> Timed:
        key_index, copy = index % KEYS, index // KEYS
        key = keys[key_index]
        return send_payment(ports[(key_index + copy) % 2], key, payment_body(amounts[key], tokens[key], merchant_id))

    answers = timed_only(run_together(KEYS * COPIES_PER_KEY, send))
    expected_status = {"tok_ok": ("succeeded", 201), "tok_declined": ("failed", 402)}
    final: dict[str, str] = {}
    for key_index, key in enumerate(keys):
        status, code = expected_status[tokens[key]]
        executed = assert_executed_once(answers[key_index::KEYS], code)
        assert (executed.body["status"], executed.body["amount_minor"]) == (status, amounts[key]), executed
        if status == "failed":
            assert (executed.error, executed.body["failure_code"]) == ("card_declined", "card_declined"), executed
        final[executed.body["id"]] = status
    assert len(final) == KEYS
    return final, sum(amounts[key] for key in keys if tokens[key] == "tok_ok")


# ---------------------------------------------------------------------------- 1. API processes


@pytest.mark.slow
@pytest.mark.parametrize("webhooks", ["to_first_api", "to_nobody"])
def test_one_key_sent_to_two_api_processes_at_once_charges_once(
    tmp_path: Path, database_url: str, started: list[tuple[str, Stoppable]], webhooks: str
) -> None:
    # to_first_api: the webhook (delivered during the held answer) usually settles the payment
    # and the key's answer first, and the API's own step 3 finds it settled. to_nobody: the
    # executing API process settles both, and the duplicates on the other process read them.
    webhooks_to_api = webhooks == "to_first_api"
    sandbox, ports = start_sandbox_and_two_apis(tmp_path, database_url, started, webhooks_to_api=webhooks_to_api)
    merchant_id = create_merchant(ports[0])
    delay = {"fault": "delay_ms", "delay_ms": HELD_MS, "ops": ["charge"]}

    # One key, sent 8 times at once, alternating between the two processes.
    amount_minor = 4321
    body = payment_body(amount_minor, "tok_ok", merchant_id)
    sandbox.set_faults({"seed": 1, "rules": [{**delay, "next_n": 1}]})
    answers = timed_only(run_together(SAME_KEY_COPIES, lambda index: send_payment(ports[index % 2], "same-key", body)))
    created = assert_executed_once(answers, 201)
    [rule] = sandbox.faults()["rules"]
    assert rule["remaining"] == 0, rule  # the one charge call was the held one
    payment_id = created.body["id"]
    assert (created.body["status"], created.body["amount_minor"]) == ("succeeded", amount_minor)
    assert [p["id"] for p in all_payments(ports[1])] == [payment_id]
    assert_charged_once_each(sandbox, {payment_id: "succeeded"})
    assert_single_resolution(ports[1], payment_id, "succeeded")
    for port in ports:  # both processes read the same committed balance
        assert balance(port, merchant_id) == (amount_minor, 0, amount_minor)

    # 10 keys, 3 copies each, all 30 at once; each key's copies go to both processes.
    sandbox.set_faults({"seed": 2, "rules": [{**delay, "next_n": KEYS}]})
    final, succeeded_minor = send_keys_at_once(ports, merchant_id)
    [rule] = sandbox.faults()["rules"]
    assert rule["remaining"] == 0, rule  # exactly one held charge call per key
    listed = {p["id"]: p["status"] for p in all_payments(ports[0])}
    assert listed == {payment_id: "succeeded", **final}, listed
    assert_charged_once_each(sandbox, {payment_id: "succeeded", **final})
    for index, (paid, status) in enumerate(final.items()):
        assert_single_resolution(ports[index % 2], paid, status)
    for port in ports:
        assert balance(port, merchant_id) == (amount_minor + succeeded_minor, 0, amount_minor + succeeded_minor)
    winners = Counter(state_changes(ports[0], paid)[1][2] for paid in [payment_id, *final])
    print(f"webhooks {webhooks}: who moved each payment out of processing: {dict(winners)}")
    if not webhooks_to_api:
        assert winners == Counter({"processor_answer": 1 + KEYS}), winners
    assert_ledger_verifies(database_url)


# ---------------------------------------------------------------------------- 2. worker processes


def worker_env(database_url: str, processor_url: str) -> dict[str, str]:
    return clean_env(
        PAYCORE_DATABASE_URL=database_url,
        PAYCORE_DB_POOL_SIZE=str(SERVER_POOL_SIZE),
        PAYCORE_PROCESSOR_URL=processor_url,
        PAYCORE_PROCESSOR_TIMEOUT_MS=str(PROCESSOR_TIMEOUT_MS),
        PAYCORE_CLAIM_LEASE_MS=str(LEASE_MS),
        PAYCORE_RESOLVER_BATCH_MAX=str(RESOLVER_BATCH_MAX),
        PAYCORE_RESOLVER_BACKOFF_MS="100",
        PAYCORE_WORKER_INTERVAL_MS="100",
        PAYCORE_PROCESSING_STALE_MS="600000",
    )


def sandbox_without_webhooks(tmp_path: Path, started: list[tuple[str, Stoppable]]) -> SandboxProcess:
    nobody = free_port()  # webhooks are refused: the resolvers alone resolve
    sandbox = SandboxProcess(
        tmp_path / "sandbox.db", f"http://127.0.0.1:{nobody}/v1/webhooks/processor", tmp_path / "sandbox.log"
    )
    started.append(("sandbox", sandbox))
    sandbox.start()
    return sandbox


def create_in_doubt_payments(client: TestClient, merchant_id: str) -> dict[str, tuple[str, int]]:
    """IN_DOUBT_COUNT payments whose answers are all lost: {payment id: (token, amount)}."""
    created: dict[str, tuple[str, int]] = {}
    for index in range(IN_DOUBT_COUNT):
        token = "tok_declined" if index % 3 == 2 else "tok_ok"
        amount_minor = 3000 + 7 * index
        reply = client.post(
            "/v1/payments",
            json=payment_body(amount_minor, token, merchant_id),
            headers={"Idempotency-Key": f"doubt-{index}", "Paycore-Tenant": TENANT},
        )
        assert reply.status_code == 202 and reply.json()["status"] == "in_doubt", reply.text
        created[reply.json()["id"]] = (token, amount_minor)
    return created


def nothing_unresolved(client: TestClient) -> bool | None:
    for status in ("in_doubt", "processing"):
        reply = client.get(f"/v1/payments?status={status}&limit=100", headers={"Paycore-Tenant": TENANT})
        assert reply.status_code == 200, reply.text
        if reply.json()["data"]:
            return None
    return True


def assert_resolved_once(
    client: TestClient, database: Database, payment_id: str, token: str, pids: Sequence[int]
) -> int:
    """One transition out of in_doubt, by a resolver, after one get_charge; returns its worker's pid."""
    expected = "succeeded" if token == "tok_ok" else "failed"
    body = client.get(f"/v1/payments/{payment_id}", headers={"Paycore-Tenant": TENANT}).json()
    steps = [(s["from"], s["to"], s["cause"], s["actor"]) for s in body["history"]]
    assert [step[:3] for step in steps] == [
        (None, "processing", "api_request"),
        ("processing", "in_doubt", "processor_answer"),
        ("in_doubt", expected, "resolver"),
    ], steps
    assert steps[-1][3] == "worker:resolve_payments", steps
    assert (body["status"], body["failure_code"]) == (expected, None if token == "tok_ok" else "card_declined")
    events = client.get(f"/v1/payments/{payment_id}/events", headers={"Paycore-Tenant": TENANT}).json()["data"]
    [resolved] = [e for e in events if e["kind"] == "state_change" and e["from"] == "in_doubt"]
    [pid] = [pid for pid in pids if f":{pid}:" in worker_of(resolved)]
    calls = [(e["type"], e["cause"], e["actor"]) for e in events if e["kind"] == "processor_call"]
    assert calls == [
        ("processor.charge", "unreachable", "local"),
        ("processor.get_charge", "answered", "worker:resolve_payments"),
    ], calls
    [asked] = [e for e in events if e["type"] == "processor.get_charge"]
    assert worker_of(asked) == worker_of(resolved), (asked, resolved)  # one worker asked and moved it
    row = payment_row(database, payment_id)
    assert (row["attempts"], row["claimed_by"], row["next_attempt_at_us"]) == (1, None, None), row
    return pid


@pytest.mark.slow
def test_two_workers_resolve_many_in_doubt_payments_each_exactly_once(
    tmp_path: Path,
    settings: Settings,
    database_url: str,
    database: Database,
    started: list[tuple[str, Stoppable]],
) -> None:
    sandbox = sandbox_without_webhooks(tmp_path, started)
    api_settings = replace(settings, processor_timeout_ms=API_TIMEOUT_MS)
    processor = HttpTransport(sandbox.url, timeout_ms=API_TIMEOUT_MS)
    with TestClient(create_app(api_settings, database, processor)) as client:
        merchant = client.post(
            "/v1/accounts",
            json={"code": "merchant.main", "currency": "USD", "normal_balance": "credit"},
            headers={"Idempotency-Key": "merchant-account", "Paycore-Tenant": TENANT},
        )
        assert merchant.status_code == 201, merchant.text
        merchant_id = merchant.json()["id"]

        # 1. The processor takes every charge and every answer is lost: all in_doubt, on hold.
        sandbox.set_faults(
            {"seed": 3, "hold_ms": 0, "rules": [{"fault": "drop_response", "percent": 100, "ops": ["charge"]}]}
        )
        created = create_in_doubt_payments(client, merchant_id)
        final = {paid: "succeeded" if token == "tok_ok" else "failed" for paid, (token, _) in created.items()}
        assert_charged_once_each(sandbox, final)
        total_minor = sum(amount for _, amount in created.values())
        found = client.get(f"/v1/accounts/{merchant_id}/balance", headers={"Paycore-Tenant": TENANT}).json()
        assert (found["posted_minor"], found["pending_minor"], found["available_minor"]) == (0, total_minor, 0)

        # 2. Answers get through again (each get_charge a little slow), and two workers start.
        delay = {"fault": "delay_ms", "delay_ms": GET_CHARGE_DELAY_MS, "percent": 100, "ops": ["get_charge"]}
        sandbox.set_faults({"seed": 4, "rules": [delay]})
        env = worker_env(database_url, sandbox.url)
        workers = [CliProcess(["worker"], env, tmp_path / f"worker-{index}.log") for index in range(2)]
        for index, worker in enumerate(workers):
            started.append((f"worker {index}", worker))
            worker.launch()
        started_s = time.monotonic()
        wait_for(
            "no payment is in_doubt or processing",
            lambda: nothing_unresolved(client),
            WAIT_S,
            lambda: "\n".join(worker.log() for worker in workers),
        )
        print(f"two workers resolved {IN_DOUBT_COUNT} payments in {time.monotonic() - started_s:.1f} s")
        assert all(worker.running() for worker in workers), "a worker exited while resolving"
        pids = [worker.pid for worker in workers]
        for worker in workers:  # the checks read a quiet database
            worker.stop()

        # 3. One resolution per payment, by one get_charge; both workers took part.
        split = Counter(
            assert_resolved_once(client, database, payment_id, token, pids)
            for payment_id, (token, _) in created.items()
        )
        print(f"payments resolved per worker pid: {dict(split)}")
        assert set(split) == set(pids), split
        assert_charged_once_each(sandbox, final)
        succeeded_minor = sum(amount for token, amount in created.values() if token == "tok_ok")
        found = client.get(f"/v1/accounts/{merchant_id}/balance", headers={"Paycore-Tenant": TENANT}).json()
        assert (found["posted_minor"], found["pending_minor"], found["available_minor"]) == (
            succeeded_minor,
            0,
            succeeded_minor,
        )
    assert_ledger_verifies(database_url)
