"""Webhooks to paycore: an outbox written with each status change, and a deliverer.

At least once, possibly out of order: an event is queued in the transaction that changed the
object, then sent by `Deliverer.deliver_due` (after the commit, outside any transaction) and
retried with exponential backoff and jitter until a 2xx or `webhook_attempts_max` attempts.
Every attempt is recorded. Each event carries the object's `sequence` (for a charge or a
refund 1, then 2 if it was pending first; for a payout 2 when rejected or settled, 3 when
returned), so a receiver can tell an old status from a new one.

A round of delivery leases up to `webhook_batch_max` due deliveries in one transaction, sends
them, and records every attempt in one more. One object's deliveries are sent one after
another, in the order they came due; different objects' go at once, up to
`webhook_concurrency_max` in flight (whoever sends them) and what the sink takes
(`sink.sink_concurrency`: one for a plain callable, its pool's size for `http_sink`).

The fault plan shapes delivery per object: `duplicate_webhook` queues every event of the
object twice (same event id, same body), `reorder_webhooks` holds the object's earlier
events back until its final event is queued, then releases them to go after it. (A payout's
`settled` event is final unless a return is planned for it.)
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit import clock
from paycore.kit.ids import new_ulid
from paycore.kit.signing import SIGNATURE_HEADER, sign
from paycore_sandbox import webhook_repository as repository
from paycore_sandbox.limits import SandboxSettings
from paycore_sandbox.sink import WebhookSink, sink_concurrency
from paycore_sandbox.webhook_repository import Due

log = logging.getLogger(__name__)

OBJECT_TYPES: Final = ("charge", "refund", "payout", "dispute")
EVENT_ID_PREFIX: Final = "evt_sbx_"
DELIVERY_ID_PREFIX: Final = "whd_"
ERROR_LENGTH_MAX: Final = 500
_BACKOFF_DOUBLINGS_MAX: Final = 30  # 2**30 times the first delay is past any cap
# Compact, UTF-8 as it is: `json.dumps` with these options built an encoder for every event.
_BODY_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class EventSpec:
    object_type: str  # charge | refund | payout | dispute
    object_request_id: str
    sequence: int
    status: str
    data: Mapping[str, Any]
    duplicate: bool
    reorder: bool
    final: bool  # the object's last event: the held ones (reorder) are released after it
    event_type: str | None = None  # None: "<object_type>.<status>" (a dispute's are created, updated, closed)
    dropped: bool = False  # drop_webhook: never sent (the held ones are released all the same)


def enqueue(connection: Connection, event: EventSpec, now_us: int) -> str:
    """Queue an event (twice if duplicated) in the caller's transaction; return its id."""
    assert event.object_type in OBJECT_TYPES and event.sequence >= 1
    assert event.data["status"] == event.status
    event_id = EVENT_ID_PREFIX + new_ulid()
    event_type = event.event_type or f"{event.object_type}.{event.status}"
    body = _BODY_ENCODER.encode(
        {
            "id": event_id,
            "type": event_type,
            "created_at": clock.to_rfc3339(now_us),
            "sequence": event.sequence,
            "data": dict(event.data),
        }
    )
    row = {
        "event_id": event_id,
        "object_type": event.object_type,
        "object_request_id": event.object_request_id,
        "sequence": event.sequence,
        "event_type": event_type,
        "body": body,
        "state": "pending",
        "held": event.reorder and not event.final,
        "attempts": 0,
        "created_at_us": now_us,
        "due_at_us": now_us,
        "delivered_at_us": None,
    }
    copies = 2 if event.duplicate else 1
    rows = [{**row, "delivery_id": DELIVERY_ID_PREFIX + new_ulid()} for _ in range(copies)]
    if event.dropped:
        log.info("webhook %s %s dropped (sandbox fault drop_webhook)", event_id, event_type)
    else:
        repository.insert_webhooks(connection, rows)
    if event.reorder and event.final:
        # The earlier events go after this one: one microsecond later in the due order.
        repository.release_held(connection, event.object_type, event.object_request_id, now_us + 1)
    return event_id


@dataclass(frozen=True)
class _Sent:
    due: Due
    http_status: int | None  # None: no answer came
    error: str | None

    @property
    def ok(self) -> bool:
        return self.http_status is not None and 200 <= self.http_status < 300


class Deliverer:
    def __init__(self, database: Database, settings: SandboxSettings, secret: str) -> None:
        assert secret, "webhooks are always signed"
        self._database = database
        self._settings = settings
        self._secret = secret
        self._jitter = random.Random()  # jitter only spreads retries; it needs no seed
        # Deliveries in flight, whoever sends them (the background loop, the HTTP deliver endpoint).
        self._in_flight = threading.BoundedSemaphore(settings.webhook_concurrency_max)

    def deliver_due(self, sink: WebhookSink, now_us: int | None = None) -> int:
        """Send, once, every delivery due at `now_us` (bounded by webhook_batch_max); return
        how many were answered with a 2xx."""
        now = clock.now_us() if now_us is None else now_us
        leased_until_us = now + self._settings.lease_ms * 1_000
        limit = self._settings.webhook_batch_max
        claimed = self._database.transaction(
            lambda connection: repository.claim_due(connection, now, leased_until_us, limit)
        )
        if not claimed:
            return 0
        sent = self._send_all(sink, claimed)
        self._database.transaction(lambda connection: self._record(connection, sent, now))
        return sum(1 for one in sent if one.ok)

    def _send_all(self, sink: WebhookSink, claimed: Sequence[Due]) -> list[_Sent]:
        """Each object's deliveries one after another, in order; objects at once, on up to
        webhook_concurrency_max threads (the calling one when one is enough)."""
        lanes: dict[tuple[str, str], list[Due]] = {}
        for due in claimed:
            lanes.setdefault((due.object_type, due.object_request_id), []).append(due)
        at_once = min(self._settings.webhook_concurrency_max, sink_concurrency(sink), len(lanes))
        if at_once <= 1:
            return [self._send(sink, due) for due in claimed]
        waiting = deque(lanes.values())
        sent: list[_Sent] = []  # list.extend is atomic
        failures: list[BaseException] = []

        def send_lanes() -> None:
            try:
                while waiting:
                    try:
                        lane = waiting.popleft()  # atomic: each lane goes to one thread
                    except IndexError:
                        return
                    sent.extend([self._send(sink, due) for due in lane])
            except BaseException as failure:  # a bug, not the receiver's doing: raised below
                failures.append(failure)

        # Daemon threads of this round: nothing outlives it to stop or to hold the process up.
        threads = [threading.Thread(target=send_lanes, name="sandbox-webhooks", daemon=True) for _ in range(at_once)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        return sent

    def _send(self, sink: WebhookSink, due: Due) -> _Sent:
        with self._in_flight:
            body = due.body.encode()
            headers = {
                "Content-Type": "application/json",
                # Signed at the moment of sending (real time, whatever `now_us` a test passes),
                # because the receiver checks the timestamp against its own clock.
                SIGNATURE_HEADER: sign(self._secret, clock.now_us() // 1_000_000, body),
                "User-Agent": "paycore-sandbox",
            }
            try:
                return _Sent(due, sink(body, headers), None)
            except Exception as failure:  # any failure to get an answer is one failed attempt
                error = f"{type(failure).__name__}: {failure}"[:ERROR_LENGTH_MAX]
        log.info("webhook %s not delivered: %s", due.event_id, error)
        return _Sent(due, None, error)

    def _record(self, connection: Connection, sent: Sequence[_Sent], now_us: int) -> None:
        """Every attempt of the round, then each delivery's new state."""
        repository.insert_attempts(
            connection,
            [
                {
                    "delivery_id": one.due.delivery_id,
                    "attempt": one.due.attempts + 1,
                    "attempted_at_us": now_us,
                    "http_status": one.http_status,
                    "error": one.error,
                }
                for one in sent
            ],
        )
        delivered: dict[int, list[str]] = {}  # by attempt number: one statement for each
        for one in sent:
            attempt = one.due.attempts + 1
            if one.ok:
                delivered.setdefault(attempt, []).append(one.due.delivery_id)
            elif attempt >= self._settings.webhook_attempts_max:
                log.warning("webhook %s given up after %d attempts", one.due.event_id, attempt)
                repository.mark_dead(connection, one.due.delivery_id, attempt)
            else:
                due_at_us = now_us + self.backoff_ms(attempt) * 1_000
                repository.mark_retry(connection, one.due.delivery_id, attempt, due_at_us)
        for attempt, delivery_ids in delivered.items():
            repository.mark_delivered(connection, delivery_ids, attempt, now_us)

    def backoff_ms(self, attempt: int) -> int:
        """Exponential from webhook_backoff_ms_first, capped at webhook_backoff_ms_max, with
        the upper half jittered so that many failed deliveries do not come back together."""
        assert attempt >= 1
        doublings = min(attempt - 1, _BACKOFF_DOUBLINGS_MAX)
        delay_ms = min(self._settings.webhook_backoff_ms_max, self._settings.webhook_backoff_ms_first * 2**doublings)
        jittered_ms: int = delay_ms // 2 + self._jitter.randint(0, delay_ms - delay_ms // 2)
        return jittered_ms
