"""Delivering the sandbox's webhooks over HTTP to a real receiver (tests/support/receiver.py):
kept-alive connections, reused from one delivery to the next; several deliveries at once, never
more than the limit; nothing lost when the receiver is down, slow or closes its connections;
and the webhook faults (duplicate, reorder) as they were, whichever transport made the objects."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select

from paycore.kit import clock
from paycore.kit.signing import SIGNATURE_HEADER, verify
from paycore.processor.port import ChargeRequest
from paycore_sandbox import Sandbox, SandboxSettings, http_sink
from paycore_sandbox.models import webhook_attempts, webhooks
from tests.integration.sandbox.conftest import HOUR_US, SECRET, SETTINGS, Harness
from tests.support.receiver import Receiver

if TYPE_CHECKING:
    from paycore_sandbox.sink import HttpSink

CONCURRENCY_MAX = SETTINGS.webhook_concurrency_max
MakeSink = Callable[..., "HttpSink"]
TIMEOUT_MS = 2_000


def charge(index: int, token: str = "tok_ok") -> ChargeRequest:
    return ChargeRequest(f"pay_{index}", "merchant_1", 1_000 + index, "USD", token)


def outbox(sandbox: Sandbox) -> list[dict[str, object]]:
    with sandbox.database.read() as connection:
        return [dict(row) for row in connection.execute(select(webhooks)).mappings()]


def attempts(sandbox: Sandbox) -> list[dict[str, object]]:
    statement = select(webhook_attempts).order_by(webhook_attempts.c.delivery_id, webhook_attempts.c.attempt)
    with sandbox.database.read() as connection:
        return [dict(row) for row in connection.execute(statement).mappings()]


def events(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(found.body) for found in receiver.delivered()]


@pytest.fixture
def keep_alive() -> Iterator[Receiver]:
    with Receiver(keep_alive=True) as receiver:
        yield receiver


@pytest.fixture
def sinks() -> Iterator[MakeSink]:
    """http_sink(url, ...), each closed at the end of the test (its idle connections)."""
    made: list[HttpSink] = []

    def make(url: str, **options: Any) -> HttpSink:
        made.append(http_sink(url, **options))
        return made[-1]

    yield make
    for sink in made:
        sink.close()


def test_webhooks_reuse_kept_alive_connections(harness: Harness, keep_alive: Receiver, sinks: MakeSink) -> None:
    sink = sinks(keep_alive.url, timeout_ms=TIMEOUT_MS)
    rounds, per_round = 4, 10
    for round_number in range(rounds):
        for index in range(per_round):
            harness.processor.charge(charge(round_number * per_round + index))
        assert harness.sandbox.deliver_due(sink) == per_round

    assert len(keep_alive.delivered()) == rounds * per_round
    # One connection per delivery in flight at most, kept from round to round; closing each
    # after its webhook made one per webhook.
    assert 1 <= keep_alive.connections <= CONCURRENCY_MAX, keep_alive.connections
    for found in keep_alive.delivered():
        assert verify(SECRET, found.headers[SIGNATURE_HEADER.lower()], found.body, now_s=int(time.time())) > 0


def test_deliveries_go_at_once_up_to_the_limit(harness: Harness, sinks: MakeSink) -> None:
    with Receiver(keep_alive=True) as slow:
        slow.default, slow.slow_s = "slow_ok", 0.2
        sink = sinks(slow.url, timeout_ms=TIMEOUT_MS, connections_max=CONCURRENCY_MAX + 4)
        for index in range(3 * CONCURRENCY_MAX):
            harness.processor.charge(charge(index))
        started = time.monotonic()

        assert harness.sandbox.deliver_due(sink) == 3 * CONCURRENCY_MAX

        elapsed_s = time.monotonic() - started
        assert slow.in_flight_max == CONCURRENCY_MAX, "the limit, and no more, even when the sink takes more"
        assert slow.connections == CONCURRENCY_MAX
        one_at_a_time_s = 3 * CONCURRENCY_MAX * slow.slow_s
        assert elapsed_s < one_at_a_time_s * 0.75, (elapsed_s, one_at_a_time_s)


def test_a_sink_that_takes_fewer_bounds_the_deliveries_in_flight(sandbox: Sandbox, sinks: MakeSink) -> None:
    with Receiver(keep_alive=True) as slow:
        slow.default, slow.slow_s = "slow_ok", 0.1
        sink = sinks(slow.url, timeout_ms=TIMEOUT_MS, connections_max=2)
        for index in range(8):
            sandbox.charge(charge(index))

        assert sandbox.deliver_due(sink) == 8
        assert slow.in_flight_max == 2 and slow.connections == 2


class Overlapping:
    """An in-memory sink that takes any number at once and records how many it had at once."""

    concurrency_max = 64

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.now = self.most = self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, body: bytes, headers: dict[str, str]) -> int:
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        time.sleep(self.hold_s)
        with self.lock:
            self.now -= 1
        return 200


def test_the_limit_holds_across_deliverers_of_one_sandbox(tmp_path: Path) -> None:
    """The background loop and `POST /v1/sandbox/webhooks/deliver` may deliver at the same time:
    together they stay within webhook_concurrency_max."""
    settings = SandboxSettings(webhook_concurrency_max=3, webhook_batch_max=12)
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 's.db'}", webhook_secret=SECRET, settings=settings)
    try:
        for index in range(24):
            sandbox.charge(charge(index))
        sink = Overlapping(hold_s=0.05)
        delivered: list[int] = []
        rounds = [threading.Thread(target=lambda: delivered.append(sandbox.deliver_due(sink))) for _ in range(2)]
        for thread in rounds:
            thread.start()
        for thread in rounds:
            thread.join(30)

        assert sorted(delivered) == [12, 12] and sink.calls == 24
        assert sink.most == 3
    finally:
        sandbox.close()


def test_a_plain_callable_is_sent_one_delivery_at_a_time(sandbox: Sandbox) -> None:
    class OneAtATime(Overlapping):
        concurrency_max = 1

    sink = OneAtATime(hold_s=0.01)
    for index in range(6):
        sandbox.charge(charge(index))

    assert sandbox.deliver_due(sink) == 6
    assert sink.most == 1


def test_a_receiver_that_is_down_or_slow_loses_nothing(sandbox_on_backend: Sandbox, sinks: MakeSink) -> None:
    """Refused connections, answers lost, a 500 and a timeout are failed attempts, each
    recorded and retried later as before, until every event has been delivered."""
    sandbox = sandbox_on_backend
    for index in range(6):
        sandbox.charge(charge(index))
    refused = sinks("http://127.0.0.1:9/hook", timeout_ms=500)  # the discard port: nobody listens

    assert sandbox.deliver_due(refused) == 0, "nobody listens: every attempt fails"
    later_us = clock.now_us() + HOUR_US
    # A new connection each time (this receiver closes every one), so that the three failures
    # go to the first three requests whatever their order: none is on a kept-alive connection,
    # where a connection closed unanswered has the sink send again (the test after this one).
    with Receiver() as receiver:
        receiver.hang_s = 1.5
        receiver.answer("error_500", "close", "timeout")
        sink = sinks(receiver.url, timeout_ms=500)
        assert sandbox.deliver_due(sink, later_us) == 3
        assert sandbox.deliver_due(sink, later_us + HOUR_US) == 3

        ids = sorted(str(event["data"]["request_id"]) for event in events(receiver))
        assert ids == [f"pay_{index}" for index in range(6)]

    rows = outbox(sandbox)
    assert {row["state"] for row in rows} == {"delivered"}
    by_delivery: dict[object, list[dict[str, object]]] = {}
    for attempt in attempts(sandbox):
        by_delivery.setdefault(attempt["delivery_id"], []).append(attempt)
    counts = sorted(len(found) for found in by_delivery.values())
    assert counts == [2, 2, 2, 3, 3, 3], "refused once each, then three failed once more"
    for found in by_delivery.values():
        assert found[0]["http_status"] is None and "ConnectionRefusedError" in str(found[0]["error"])
        assert found[-1]["http_status"] == 200 and found[-1]["error"] is None
    assert {row["attempts"] for row in rows} == {2, 3}


def test_a_connection_the_receiver_closed_while_idle_is_replaced(sandbox: Sandbox, sinks: MakeSink) -> None:
    with Receiver(keep_alive=True, idle_s=0.1) as receiver:
        sink = sinks(receiver.url, timeout_ms=TIMEOUT_MS)
        sandbox.charge(charge(1))
        assert sandbox.deliver_due(sink) == 1
        time.sleep(0.5)  # the receiver closes the idle connection; the sink still holds it
        sandbox.charge(charge(2))

        assert sandbox.deliver_due(sink) == 1

        assert receiver.connections == 2
        assert [found.mode for found in receiver.received] == ["ok", "ok"]
    assert [attempt["http_status"] for attempt in attempts(sandbox)] == [200, 200], "one attempt each"


def test_an_answer_too_large_to_read_closes_its_connection(sandbox: Sandbox, sinks: MakeSink) -> None:
    with Receiver(keep_alive=True) as receiver:
        receiver.large_bytes = 200_000
        receiver.answer("large_ok")
        sink = sinks(receiver.url, timeout_ms=TIMEOUT_MS)
        sandbox.charge(charge(1))
        assert sandbox.deliver_due(sink) == 1
        sandbox.charge(charge(2))
        assert sandbox.deliver_due(sink) == 1

        assert receiver.connections == 2, "the unread rest of the first answer is not sent into the second"


def test_duplicate_webhook_still_delivers_the_event_twice(
    harness: Harness, keep_alive: Receiver, sinks: MakeSink
) -> None:
    harness.sandbox.set_fault_plan({"seed": 3, "rules": [{"fault": "duplicate_webhook", "next_n": 1}]})
    for index in range(6):
        harness.processor.charge(charge(index))

    assert harness.sandbox.deliver_due(sinks(keep_alive.url, timeout_ms=TIMEOUT_MS)) == 7

    bodies = [found.body for found in keep_alive.delivered()]
    duplicated = [body for body in bodies if json.loads(body)["data"]["request_id"] == "pay_0"]
    assert len(duplicated) == 2 and duplicated[0] == duplicated[1], "the same event, the same bytes"
    assert len(set(bodies)) == 6


def test_reorder_webhooks_still_sends_the_final_status_first(
    harness: Harness, keep_alive: Receiver, sinks: MakeSink
) -> None:
    harness.sandbox.set_fault_plan(
        {
            "seed": 3,
            "settle_late_ms": 0,
            "rules": [{"fault": "settle_late", "next_n": 1}, {"fault": "reorder_webhooks", "next_n": 1}],
        }
    )
    for index in range(6):
        harness.processor.charge(charge(index, "tok_pending" if index % 2 else "tok_ok"))
    sink = sinks(keep_alive.url, timeout_ms=TIMEOUT_MS)

    assert harness.sandbox.deliver_due(sink) == 5, "pay_0's pending event is held back"
    harness.sandbox.settle_due(harness.later_us())
    assert harness.sandbox.deliver_due(sink, harness.later_us()) == 2 + 3

    def sequences(request_id: str) -> list[int]:
        return [int(e["sequence"]) for e in events(keep_alive) if e["data"]["request_id"] == request_id]

    assert sequences("pay_0") == [2, 1], "the reordered object: its final status first"
    for index in (1, 3, 5):
        assert sequences(f"pay_{index}") == [1, 2], "the others in the order they were made"
