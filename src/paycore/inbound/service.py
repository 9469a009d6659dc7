"""Webhooks from the processor (SPEC §10): the processor's inbound adapter, the reference path.
It turns the processor's events into the port's result types (`events.py`) and hands them, as
evidence, to the domain they concern through that domain's service (`matching.py`).

`receive` checks the signature and its timestamp (5 minutes' tolerance) before anything
else: a bad one is refused and nothing is stored (`events.verified_event`). A good one is
stored under the processor's event id (a redelivery is a no-op) and applied in the same
transaction (`matching.match`); an event for an object paycore does not know (yet) is kept as
`unmatched` and matched again by a worker (`rematch.py`) with backoff: never dropped. The data
plane's `receive.py` comes first for the usual events and falls back here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.db.sql import insert_or_ignore
from paycore.inbound import matching, rematch
from paycore.inbound.events import (
    InvalidSignature,
    InvalidWebhook,
    charge_result,
    payout_result,
    refund_result,
    verified_event,
)
from paycore.inbound.models import processor_webhooks
from paycore.inbound.rematch import rematch_due
from paycore.kit.clock import now_us as clock_now_us

# Read from here by their callers since before `events.py` and `rematch.py` were split out.
__all__ = [
    "InvalidSignature",
    "InvalidWebhook",
    "Received",
    "charge_result",
    "payout_result",
    "receive",
    "refund_result",
    "rematch_due",
    "verified_event",
]


@dataclass(frozen=True)
class Received:
    event_id: str
    result: str  # applied | stale | unmatched | duplicate | mismatch


def receive(database: Database, secret: str, signature: str | None, body: bytes) -> Received:
    event = verified_event(secret, signature, body)

    def work(connection: Connection) -> Received:
        now = clock_now_us()  # read inside: the wait for the write lock comes before it
        row = {
            "tenant_id": event.data.merchant_id,
            "event_id": event.id,
            "type": event.type,
            "object_type": event.data.object,
            "request_id": event.data.request_id,
            "payload": body.decode(),
            "status": "unmatched",
            "attempts": 0,
            "next_attempt_at_us": None,
            "created_at_us": now,
            "processed_at_us": None,
        }
        if not insert_or_ignore(connection, processor_webhooks, row, ("tenant_id", "event_id")):
            return Received(event.id, "duplicate")
        result = matching.match(connection, event, now)
        rematch.settle(
            connection, event.data.merchant_id, event.id, result, attempts=1, now_us=now, rng=random.Random()
        )
        return Received(event.id, result)

    return database.transaction(work)
