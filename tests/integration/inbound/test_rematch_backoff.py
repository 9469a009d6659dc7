"""Issue 30: the processor's events kept `unmatched` are matched again with the lifecycle's
backoff, which has jitter: each retry falls between half and all of its capped delay (whole
milliseconds), and events kept at one moment are not all retried at one moment."""

from __future__ import annotations

import time

from sqlalchemy import Connection, select, update

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.inbound import service as inbound
from paycore.inbound.models import processor_webhooks
from paycore.kit import clock
from paycore.kit.signing import sign

EVENTS = 20  # 20 delays drawn from 501 values each: all equal by chance has odds of 501**-19


def unknown_charge(index: int) -> bytes:
    return (
        f'{{"id":"evt_rematch_{index}","type":"charge.succeeded","created_at":"2026-11-29T00:00:00Z",'
        f'"sequence":2,"data":{{"object":"charge","request_id":"pay_UNKNOWN{index}","merchant_id":"default",'
        f'"status":"succeeded","amount_minor":5,"currency":"USD","processor_charge_id":"ch_{index}"}}}}'
    ).encode()


def delays_us(database: Database, *, since: str) -> list[int]:
    """Each kept event's wait, from `since` (a column, or the retry due before) to its next try."""
    with database.read() as connection:
        rows = connection.execute(select(processor_webhooks)).all()
    assert len(rows) == EVENTS and {row.status for row in rows} == {"unmatched"}
    return [row.next_attempt_at_us - row._mapping[since] for row in rows]


def test_kept_events_are_retried_after_a_jittered_bounded_delay(settings: Settings, database: Database) -> None:
    secret = settings.processor_webhook_secret
    for index in range(EVENTS):
        body = unknown_charge(index)
        received = inbound.receive(database, secret, sign(secret, int(time.time()), body), body)
        assert received.result == "unmatched"

    first = delays_us(database, since="created_at_us")  # after the 1st try: half to all of 1 s
    assert all(500_000 <= delay <= 1_000_000 and delay % 1000 == 0 for delay in first), first
    assert len(set(first)) > 1, first

    def all_due_now(connection: Connection) -> None:  # every retry due at one moment
        connection.execute(update(processor_webhooks).values(next_attempt_at_us=1))

    database.transaction(all_due_now)
    before_us = clock.now_us()
    assert inbound.rematch_due(database, batch_max=EVENTS) == EVENTS
    after_us = clock.now_us()

    with database.read() as connection:
        rows = connection.execute(select(processor_webhooks)).all()
    assert {(row.status, row.attempts) for row in rows} == {("unmatched", 2)}
    due = [row.next_attempt_at_us for row in rows]  # after the 2nd try: half to all of 2 s
    assert all(before_us + 1_000_000 <= at <= after_us + 2_000_000 for at in due), (before_us, after_us, due)
    assert len(set(due)) > 1, due
