"""PostgreSQL goes away under load and comes back (issue 29, item 1).

Real processes: the sandbox processor, one `paycore serve` and one `paycore worker`, on the
test's own PostgreSQL database. Three client threads send payments and payouts, each retried
with its own key on 503 or 409 as a careful client does. Mid-load the database refuses new
connections and every existing one is ended (`ALTER DATABASE ... ALLOW_CONNECTIONS false` and
`pg_terminate_backend`, from a connection to another database); a few seconds later it takes
connections again, and the load goes on. Then:

- no answer was a 500: every one was 2xx, 402, 409 `idempotency_request_in_progress`, or 503
  `database_unavailable` (or `database_busy`) with `Retry-After`;
- /readyz was 503 while the database was away and 200 after;
- every key gives one result, again and again: one payment or payout per key, nothing lost
  (every payment the client started is settled, the ones whose answer could not be recorded
  by the resolver) and nothing twice (one charge at the processor per payment);
- `paycore ledger verify` exits 0;
- neither process was restarted, each logged the outage as one line when it began and one when
  it ended (never one per failed attempt), and both serve normally after.

A connection that was past PostgreSQL's check when connections were refused still arrives and
may serve a request before the test ends it: the process then saw the database come back for a
moment and go again, two outages, and logs them as such. So the lines must alternate, begin with
`began`, end with `ended`, and one outage must have begun while the database was away and ended
after it came back (by the lines' timestamps).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit.clock import now_us, parse_rfc3339
from paycore.payments.models import payments
from paycore.payouts.models import payouts
from tests.e2e.payments_support import CliProcess, SandboxProcess, clean_env
from tests.e2e.support import SERVER_POOL_SIZE, Reply, StartServers, assert_ledger_verifies, call, free_port
from tests.support import databases
from tests.support.outage import allow_connections, refuse_connections
from tests.support.payouts import funded_source

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TENANT = "default"
HEADERS = {"Paycore-Tenant": TENANT}
CLIENTS = 3
BEFORE_S = 3.0  # load before the outage
AWAY_S = 5.0  # how long the database refuses connections
AFTER_S = 4.0  # load after it is back
SETTLE_S = 30.0  # bound on every key reaching its final answer afterwards
REQUEST_TIMEOUT_S = 15.0
CLIENT_PAUSE_S = 0.3  # a client's wait before retrying, below what Retry-After asks: the test is short
PROCESSOR_TIMEOUT_MS = 2_000
STALE_MS = 3_000  # a payment left `processing` (its answer not recorded) is the resolver's after this
TRANSIENT = {(409, "idempotency_request_in_progress"), (503, "database_unavailable"), (503, "database_busy")}
ACH = {"name": "Ada Lovelace", "routing_number": "110000000", "account_number": "000123456789"}


@pytest.fixture
def postgres_url(postgres_databases: databases.PostgresDatabases) -> Iterator[str]:
    with databases.fresh_url("postgres", None, postgres_databases) as url:
        yield url


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[SandboxProcess]:
    nobody = free_port()  # webhooks are refused: the API and the resolver alone settle payments
    process = SandboxProcess(
        tmp_path / "sandbox.db", f"http://127.0.0.1:{nobody}/v1/webhooks/processor", tmp_path / "sandbox.log"
    )
    process.start()
    yield process
    process.stop()
    print(f"--- sandbox (port {process.port}):\n{process.log()}")


def common_env(sandbox: SandboxProcess) -> dict[str, str]:
    return {
        "PAYCORE_PROCESSOR_URL": sandbox.url,
        "PAYCORE_PROCESSOR_TIMEOUT_MS": str(PROCESSOR_TIMEOUT_MS),
        "PAYCORE_PROCESSING_STALE_MS": str(STALE_MS),
        "PAYCORE_IDEMPOTENCY_WAIT_MS": "2000",
        "PAYCORE_CLAIM_LEASE_MS": "3000",
        "PAYCORE_RESOLVER_BACKOFF_MS": "100",
        "PAYCORE_RESOLVER_BACKOFF_MAX_MS": "500",
        "PAYCORE_WORKER_INTERVAL_MS": "100",
    }


@dataclass
class Sent:
    """One client request: its key, what it asked, and every answer it got."""

    kind: str  # payment | payout
    key: str
    path: str
    body: dict[str, Any]
    replies: list[tuple[int, str | None, str | None]] = field(default_factory=list)  # status, error, id

    def send(self, port: int) -> Reply:
        reply = call(
            port,
            "POST",
            self.path,
            self.body,
            headers={**HEADERS, "Idempotency-Key": self.key},
            timeout_s=REQUEST_TIMEOUT_S,
        )
        identifier = reply.body.get("id") if isinstance(reply.body, dict) else None
        self.replies.append((reply.status, reply.error, identifier))
        check_reply(reply, self)
        return reply

    def final(self) -> list[tuple[int, str | None]]:
        return [(status, identifier) for status, error, identifier in self.replies if (status, error) not in TRANSIENT]


def check_reply(reply: Reply, sent: Sent) -> None:
    assert reply.status in (201, 202, 402, 409, 503), (sent.kind, sent.key, reply)
    if reply.status == 503:
        assert reply.error in ("database_unavailable", "database_busy"), reply
        assert int(reply.headers["retry-after"]) >= 1, reply
    if reply.status == 409:
        assert reply.error == "idempotency_request_in_progress", reply


@dataclass
class Load:
    port: int
    destination: str
    source: str
    stop: threading.Event = field(default_factory=threading.Event)
    sent: list[Sent] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def new(self, client: int) -> Sent:
        with self.lock:
            number = next(self.numbers)
        if number % 3 == 0:
            body = {
                "amount_minor": 100 + number,
                "currency": "USD",
                "source_account": self.source,
                "beneficiary": ACH,
                "rail": "ach",
            }
            sent = Sent("payout", f"payout-{client}-{number}", "/v1/payouts", body)
        else:
            body = {
                "amount_minor": 1_000 + number,
                "currency": "USD",
                "source": {"type": "card", "token": "tok_ok"},
                "destination_account": self.destination,
            }
            sent = Sent("payment", f"payment-{client}-{number}", "/v1/payments", body)
        with self.lock:
            self.sent.append(sent)
        return sent

    def run(self, client: int) -> None:
        """Send a request, retry it with its key while the answer is transient, then the next."""
        try:
            while not self.stop.is_set():
                sent = self.new(client)
                while not self.stop.is_set():
                    reply = sent.send(self.port)
                    if (reply.status, reply.error) not in TRANSIENT:
                        break
                    time.sleep(CLIENT_PAUSE_S)
        except BaseException as error:  # reported by the test
            self.errors.append(error)


@dataclass
class Readiness:
    port: int
    stop: threading.Event = field(default_factory=threading.Event)
    # (sent at, answered at, status): a probe sent just before the database was let back may
    # be checked after it and rightly answer 200, so "during" is judged by both ends.
    seen: list[tuple[float, float, int]] = field(default_factory=list)

    def run(self) -> None:
        while not self.stop.is_set():
            sent_at = time.monotonic()
            status = call(self.port, "GET", "/readyz", timeout_s=REQUEST_TIMEOUT_S).status
            self.seen.append((sent_at, time.monotonic(), status))
            time.sleep(0.2)


def settle(load: Load) -> None:
    """Every key to its final answer, asked again with the same key (bounded), then once more."""
    deadline = time.monotonic() + SETTLE_S
    for sent in load.sent:
        while True:
            reply = sent.send(load.port)
            if (reply.status, reply.error) not in TRANSIENT:
                break
            assert time.monotonic() < deadline, f"{sent.key} still {reply} after {SETTLE_S} s"
            time.sleep(CLIENT_PAUSE_S)
        sent.send(load.port)  # a replay: the same answer again


def outage_records(log_path: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for line in log_path.read_text(errors="replace").splitlines():
        if '"database_unavailable"' not in line:
            continue
        record = json.loads(line)
        if record.get("event") == "database_unavailable":
            records.append(record)
    return records


def assert_outage_logged(log_path: Path, away_from_us: int, back_at_us: int) -> None:
    """One line when an outage began and one when it ended, never one per failed attempt: the
    states alternate, and one outage began while the database was away (wall clock, microseconds)
    and ended after it was let back. At most one more: a late connection at the start (the
    module's docstring)."""
    records = outage_records(log_path)
    states = [record["state"] for record in records]
    explain = (states, outage_log(log_path))
    assert states and len(states) % 2 == 0, explain
    assert states == ["began", "ended"] * (len(states) // 2), explain
    assert len(states) <= 4, explain
    ended = [record for record in records if record["state"] == "ended"]
    assert all(record["failures"] >= 1 for record in ended), explain
    began_us = [parse_rfc3339(record["ts"]) for record in records if record["state"] == "began"]
    ended_us = [parse_rfc3339(record["ts"]) for record in ended]
    assert any(away_from_us <= began <= back_at_us <= end for began, end in zip(began_us, ended_us, strict=True)), (
        away_from_us,
        back_at_us,
        explain,
    )
    assert sum(int(record["failures"]) for record in ended) > len(states), explain  # not a line per attempt


def outage_log(log_path: Path) -> list[str]:
    """The process's lines about the database, in order: what to read when the count is off."""
    return [line for line in log_path.read_text(errors="replace").splitlines() if "database" in line.lower()][:40]


def events_in(log_path: Path, event: str) -> list[str]:
    return [line for line in log_path.read_text(errors="replace").splitlines() if f'"event": "{event}"' in line]


def test_the_database_going_away_under_load_loses_nothing_and_answers_no_500(
    tmp_path: Path, postgres_url: str, sandbox: SandboxProcess, serve_processes: StartServers
) -> None:
    database = Database(Settings(database_url=postgres_url, db_pool_size=2))
    try:
        run_the_outage(tmp_path, postgres_url, database, sandbox, serve_processes)
    finally:
        database.dispose()


def run_the_outage(
    tmp_path: Path, postgres_url: str, database: Database, sandbox: SandboxProcess, serve_processes: StartServers
) -> None:
    [server] = serve_processes(1, postgres_url, **common_env(sandbox))
    worker_env = clean_env(
        PAYCORE_DATABASE_URL=postgres_url, PAYCORE_DB_POOL_SIZE=str(SERVER_POOL_SIZE), **common_env(sandbox)
    )
    worker = CliProcess(["worker"], worker_env, tmp_path / "worker.log")
    worker.launch()
    try:
        load = prepare(server.port, database)
        readiness = Readiness(server.port)
        threads = [threading.Thread(target=load.run, args=(index,), daemon=True) for index in range(CLIENTS)]
        threads.append(threading.Thread(target=readiness.run, daemon=True))
        for thread in threads:
            thread.start()
        time.sleep(BEFORE_S)
        away_from_us = now_us()
        refuse_connections(postgres_url)
        gone_at = time.monotonic()  # every connection ended: nothing reaches the database from here
        time.sleep(AWAY_S)
        back_at_us, letting_back = now_us(), time.monotonic()  # before: a process may be back before it returns
        allow_connections(postgres_url)
        back_at = time.monotonic()
        time.sleep(AFTER_S)
        load.stop.set()
        readiness.stop.set()
        for thread in threads:
            thread.join(REQUEST_TIMEOUT_S * 2)
        assert not any(thread.is_alive() for thread in threads)
        assert load.errors == [], load.errors
        assert_answers(load, readiness, (gone_at, letting_back), back_at)
        settle(load)
        assert_one_result_per_key(load, database, sandbox)
        assert_ledger_verifies(postgres_url)
        assert server.starts == 1 and server.process is not None and server.process.poll() is None
        assert worker.running(), worker.log()
        assert call(server.port, "GET", "/readyz").status == 200
        assert_serves_normally(load)
        assert_outage_logged(server.log_path, away_from_us, back_at_us)
        assert_outage_logged(worker.log_path, away_from_us, back_at_us)
        assert events_in(server.log_path, "unhandled_error") == []
        assert events_in(worker.log_path, "job_failed") == [], worker.log()
    finally:
        allow_connections(postgres_url)
        worker.stop()
        print(f"--- worker:\n{worker.log()}")


def prepare(port: int, database: Database) -> Load:
    reply = call(port, "POST", "/v1/accounts", {"code": "merchant.main", "currency": "USD", "normal_balance": "credit"})
    assert reply.status == 201, reply
    source = funded_source(database, TENANT, 10_000_000)
    return Load(port=port, destination=str(reply.body["id"]), source=source)


def assert_answers(load: Load, readiness: Readiness, away: tuple[float, float], back_at: float) -> None:
    """No 500 ever; the outage answered 503 by `/readyz` for every probe sent and answered
    while the database was `away` (from when its last connection ended until it was let back),
    and 200 again two seconds after `back_at`."""
    statuses = [status for sent in load.sent for status, _, _ in sent.replies]
    assert 500 not in statuses
    unavailable = [r for sent in load.sent for r in sent.replies if r[1] == "database_unavailable"]
    assert unavailable, "the load never saw the outage"
    assert any(status in (201, 202, 402) for status in statuses)
    during = [status for sent_at, answered_at, status in readiness.seen if away[0] < sent_at < answered_at < away[1]]
    after = [status for sent_at, _, status in readiness.seen if sent_at > back_at + 2]
    assert during and set(during) == {503}, readiness.seen
    assert after and set(after) == {200}, readiness.seen


def assert_one_result_per_key(load: Load, database: Database, sandbox: SandboxProcess) -> None:
    for sent in load.sent:
        final = sent.final()
        assert final and len(set(final)) == 1, (sent.key, sent.replies)  # one result, again and again
        status, identifier = final[0]
        assert identifier is not None, (sent.key, sent.replies)
        if sent.kind == "payment":
            assert status == 201, (sent.key, sent.replies)  # tok_ok, a processor without faults: succeeded
    with database.read() as connection:
        payment_rows = connection.execute(select(payments.c.idempotency_key, payments.c.id, payments.c.status)).all()
        payout_rows = connection.execute(select(payouts.c.idempotency_key, payouts.c.id)).all()
        keys_total = connection.execute(select(func.count()).select_from(payments)).scalar_one()
    paid = {sent.key: sent.final()[0][1] for sent in load.sent if sent.kind == "payment"}
    paid_out = {sent.key: sent.final()[0][1] for sent in load.sent if sent.kind == "payout"}
    assert {row.idempotency_key: row.id for row in payment_rows} == paid
    assert len(payment_rows) == keys_total == len(paid)
    assert {row.status for row in payment_rows} == {"succeeded"}
    assert {row.idempotency_key: row.id for row in payout_rows} == paid_out
    assert len(payout_rows) == len(paid_out)
    charged = [row["request_id"] for row in sandbox.charge_rows()]
    assert sorted(charged) == sorted(str(payment_id) for payment_id in paid.values()), (
        "one charge at the processor per payment, none twice"
    )


def assert_serves_normally(load: Load) -> None:
    sent = load.new(99)
    reply = sent.send(load.port)
    assert reply.status == 201, reply
