"""The processor's webhook from the event loop (ADR 0026 decision 4), on both databases: its
plain case (a charge event for a payment its answer already settled, the usual case) crosses no
worker thread, as SQLite's already did; on PostgreSQL its one call on a connection of the loop
(`inbound/receive.py`'s `_receive_postgres`, `db/loop_calls.py`).

- The plain case submits nothing to a worker thread, a first delivery (`stale`) and a
  redelivery (`duplicate`) alike; an event the reference path decides (a payment this
  processor never had) takes one, which shows the count can fail.
- On PostgreSQL it is the thread's one call, the same statement, no client commit.
- On PostgreSQL a connection lost during the call is answered as the thread path answered it
  (503, the commit's outcome unknown: the processor sends it again), nothing is stored, and the
  redelivery is received once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text

from paycore.inbound import receive
from paycore.kit.signing import SIGNATURE_HEADER
from tests.integration.inbound.test_receive_data_plane import crafted, settled, signed, tenant_of
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_operations_on_loop import PaymentBlocker, lost
from tests.support.statements import counting

PATH = "/v1/webhooks/processor"
INPROCESS = pytest.mark.parametrize("transport", ["inprocess"], indirect=True)


def deliver(env: Env, body: bytes) -> Any:
    _, signature, _ = signed(env, body)
    return env.client.post(PATH, content=body, headers={SIGNATURE_HEADER: signature})


def on_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the webhook is received as before this edge's loop path: all of `receive`
    on one worker thread (PostgreSQL)."""

    async def whole_on_a_thread(database: Any, secret: str, signature: Any, body: bytes, *, in_thread: Any) -> Any:
        return await in_thread(receive.receive, database, secret, signature, body)

    monkeypatch.setattr(receive, "receive_async", whole_on_a_thread)


@INPROCESS
def test_a_plain_webhook_takes_no_worker_thread(env: Env, submitted: list[str]) -> None:
    warm_up_id, warm_up = settled(env, "succeeded")
    assert deliver(env, warm_up).json()["result"] == "stale"  # the pools warm
    _, body = settled(env, "succeeded")
    tenant_id = tenant_of(env.database, warm_up_id)
    submitted.clear()
    answers = [deliver(env, body) for _ in range(2)]
    assert [(a.status_code, a.json()["result"]) for a in answers] == [(200, "stale"), (200, "duplicate")]
    assert submitted == [], "the plain case from the loop"
    unknown = crafted("pay_never_made", tenant_id)
    assert deliver(env, unknown).status_code == 200
    assert submitted, "the reference path takes its worker thread: the count can fail"


@INPROCESS
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("way", ["loop", "thread"])
def test_the_call_from_the_loop_is_the_threads(env: Env, way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _, warm_up = settled(env, "succeeded")
    deliver(env, warm_up)
    if way == "thread":
        on_a_thread(monkeypatch)
    _, body = settled(env, "failed")
    with counting(env.database) as statements:
        answer = deliver(env, body)
    assert answer.json()["result"] == "stale", answer.text
    assert len(statements) == 1 and statements[0].startswith("SELECT paycore_inbound_receive("), statements


@INPROCESS
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("way", ["loop", "thread"])
def test_a_connection_lost_during_the_call_is_answered_as_on_the_thread(
    env: Env, way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, warm_up = settled(env, "succeeded")
    deliver(env, warm_up)
    if way == "thread":
        on_a_thread(monkeypatch)
    payment_id, body = settled(env, "succeeded")
    event_id = json.loads(body)["id"]

    class ReceiveBlocker(PaymentBlocker):
        CALLS = "paycore_inbound_receive"

    blocker = ReceiveBlocker(env, payment_id)
    blocker.hold()
    try:
        answer = deliver(env, body)
    finally:
        blocker.release()
    assert len(blocker.ended) == 1, "the call was waiting on the payment's row, and was ended"
    lost(answer)
    assert stored(env, event_id) == 0, "the call rolled back with its backend"
    again = deliver(env, body)  # the processor sends it again
    assert (again.status_code, again.json()["result"]) == (200, "stale"), again.text
    assert stored(env, event_id) == 1


def stored(env: Env, event_id: str) -> int:
    with env.database.read() as connection:
        return int(
            connection.execute(
                text("SELECT count(*) FROM processor_webhooks WHERE event_id = :e"), {"e": event_id}
            ).scalar_one()
        )
