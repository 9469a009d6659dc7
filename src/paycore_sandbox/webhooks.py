"""Webhooks to paycore: an outbox written with each status change, and a deliverer.

At least once, possibly out of order: an event is queued in the transaction that changed the
object, then sent by `Deliverer.deliver_due` (after the commit, outside any transaction) and
retried with exponential backoff and jitter until a 2xx or `webhook_attempts_max` attempts.
Every attempt is recorded. Each event carries the object's `sequence` (for a charge or a
refund 1, then 2 if it was pending first; for a payout 2 when rejected or settled, 3 when
returned), so a receiver can tell an old status from a new one.

The fault plan shapes delivery per object: `duplicate_webhook` queues every event of the
object twice (same event id, same body), `reorder_webhooks` holds the object's earlier
events back until its final event is queued, then releases them to go after it. (A payout's
`settled` event is final unless a return is planned for it.)
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, RowMapping

from paycore.db.engine import Database
from paycore.kit import clock
from paycore.kit.ids import new_ulid
from paycore.kit.signing import SIGNATURE_HEADER, sign
from paycore_sandbox import repository
from paycore_sandbox.limits import SandboxSettings

log = logging.getLogger(__name__)

# Takes the exact body bytes and the headers to send; returns the HTTP status received, or
# raises when no answer came (connection refused, timeout).
WebhookSink = Callable[[bytes, dict[str, str]], int]

OBJECT_TYPES: Final = ("charge", "refund", "payout")
EVENT_ID_PREFIX: Final = "evt_sbx_"
DELIVERY_ID_PREFIX: Final = "whd_"
ERROR_LENGTH_MAX: Final = 500
_BACKOFF_DOUBLINGS_MAX: Final = 30  # 2**30 times the first delay is past any cap


@dataclass(frozen=True)
class EventSpec:
    object_type: str  # charge | refund | payout
    object_request_id: str
    sequence: int
    status: str
    data: Mapping[str, Any]
    duplicate: bool
    reorder: bool
    final: bool  # the object's last event: the held ones (reorder) are released after it


def enqueue(connection: Connection, event: EventSpec, now_us: int) -> str:
    """Queue an event (twice if duplicated) in the caller's transaction; return its id."""
    assert event.object_type in OBJECT_TYPES and event.sequence >= 1
    assert event.data["status"] == event.status
    event_id = EVENT_ID_PREFIX + new_ulid()
    body = json.dumps(
        {
            "id": event_id,
            "type": f"{event.object_type}.{event.status}",
            "created_at": clock.to_rfc3339(now_us),
            "sequence": event.sequence,
            "data": dict(event.data),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    final = event.final
    for _ in range(2 if event.duplicate else 1):
        repository.insert_webhook(
            connection,
            {
                "delivery_id": DELIVERY_ID_PREFIX + new_ulid(),
                "event_id": event_id,
                "object_type": event.object_type,
                "object_request_id": event.object_request_id,
                "sequence": event.sequence,
                "event_type": f"{event.object_type}.{event.status}",
                "body": body,
                "state": "pending",
                "held": event.reorder and not final,
                "attempts": 0,
                "created_at_us": now_us,
                "due_at_us": now_us,
                "delivered_at_us": None,
            },
        )
    if event.reorder and final:
        # The earlier events go after this one: one microsecond later in the due order.
        repository.release_held(connection, event.object_type, event.object_request_id, now_us + 1)
    return event_id


def http_sink(url: str, timeout_ms: int = SandboxSettings.webhook_timeout_ms) -> WebhookSink:
    """A sink that POSTs to `url` (http or https) with the stdlib, bounded by `timeout_ms`
    for the connection and for each read."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"webhook url must be http(s)://host[:port]/path, got {url!r}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    timeout_s = timeout_ms / 1000

    def send(body: bytes, headers: dict[str, str]) -> int:
        connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(parts.hostname or "", parts.port, timeout=timeout_s)
        try:
            connection.request("POST", path, body=body, headers={**headers, "Connection": "close"})
            response = connection.getresponse()
            response.read(64 * 1024)  # bounded: the answer's body is not used
            return int(response.status)
        finally:
            connection.close()

    return send


class Deliverer:
    def __init__(self, database: Database, settings: SandboxSettings, secret: str) -> None:
        assert secret, "webhooks are always signed"
        self._database = database
        self._settings = settings
        self._secret = secret
        self._jitter = random.Random()  # jitter only spreads retries; it needs no seed

    def deliver_due(self, sink: WebhookSink, now_us: int | None = None) -> int:
        """Send, once, every delivery due at `now_us` (bounded by webhook_batch_max); return
        how many were answered with a 2xx."""
        now = clock.now_us() if now_us is None else now_us
        leased_until_us = now + self._settings.lease_ms * 1_000
        limit = self._settings.webhook_batch_max
        claimed = self._database.transaction(
            lambda connection: repository.claim_due(connection, now, leased_until_us, limit)
        )
        delivered = 0
        for row in claimed:
            delivered += self._attempt(sink, row, now)
        return delivered

    def _attempt(self, sink: WebhookSink, row: RowMapping, now_us: int) -> int:
        body = row["body"].encode()
        headers = {
            "Content-Type": "application/json",
            # Signed at the moment of sending (real time, whatever `now_us` a test passes),
            # because the receiver checks the timestamp against its own clock.
            SIGNATURE_HEADER: sign(self._secret, clock.now_us() // 1_000_000, body),
            "User-Agent": "paycore-sandbox",
        }
        http_status: int | None = None
        error: str | None = None
        try:
            http_status = sink(body, headers)
        except Exception as failure:  # any failure to get an answer is one failed attempt
            error = f"{type(failure).__name__}: {failure}"[:ERROR_LENGTH_MAX]
            log.info("webhook %s not delivered: %s", row["event_id"], error)
        ok = http_status is not None and 200 <= http_status < 300
        attempt = row["attempts"] + 1
        self._database.transaction(
            lambda connection: self._record(connection, row, attempt, now_us, http_status, error)
        )
        return 1 if ok else 0

    def _record(
        self,
        connection: Connection,
        row: RowMapping,
        attempt: int,
        now_us: int,
        http_status: int | None,
        error: str | None,
    ) -> None:
        repository.record_attempt(
            connection,
            {
                "delivery_id": row["delivery_id"],
                "attempt": attempt,
                "attempted_at_us": now_us,
                "http_status": http_status,
                "error": error,
            },
        )
        if http_status is not None and 200 <= http_status < 300:
            values: dict[str, Any] = {"state": "delivered", "attempts": attempt, "delivered_at_us": now_us}
        elif attempt >= self._settings.webhook_attempts_max:
            log.warning("webhook %s given up after %d attempts", row["event_id"], attempt)
            values = {"state": "dead", "attempts": attempt}
        else:
            values = {"attempts": attempt, "due_at_us": now_us + self.backoff_ms(attempt) * 1_000}
        repository.update_delivery(connection, row["delivery_id"], values)

    def backoff_ms(self, attempt: int) -> int:
        """Exponential from webhook_backoff_ms_first, capped at webhook_backoff_ms_max, with
        the upper half jittered so that many failed deliveries do not come back together."""
        assert attempt >= 1
        doublings = min(attempt - 1, _BACKOFF_DOUBLINGS_MAX)
        delay_ms = min(self._settings.webhook_backoff_ms_max, self._settings.webhook_backoff_ms_first * 2**doublings)
        jittered_ms: int = delay_ms // 2 + self._jitter.randint(0, delay_ms - delay_ms // 2)
        return jittered_ms
