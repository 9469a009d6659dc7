"""One worker round of webhook delivery (ADR 0015): the lifecycle's commit, call, commit,
with an endpoint as the unit a worker leases.

1. Claim (one short transaction): enabled endpoints with a due delivery, not in their own
   backoff and not leased, least recently served first; each leased to this worker (FOR
   UPDATE SKIP LOCKED on PostgreSQL). With the endpoint, up to `batch_max` of its due
   deliveries and their events. One worker per endpoint at a time, whatever the number of
   processes: two workers never POST one delivery at the same moment, and an endpoint's
   first attempts go out in event order.
2. Call, with no transaction open: POST each delivery, signed, in turn, while the lease has
   room for one more call's timeout. The first failure ends the endpoint's turn: a dead
   endpoint costs one call per backoff, never one per pending event.
3. Record (one transaction per call): the attempt; the delivery delivered, rescheduled with
   backoff and jitter, or failed once its retry window (3 days) is over; the endpoint's
   health (consecutive failures, failing since, its own backoff; disabled once failing for
   `disable_after_ms`). Then the lease is released.

A worker killed mid-call leaves its lease to lapse and the delivery pending: it is sent again
(at least once) by the next worker to claim the endpoint.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.audit.service import Event
from paycore.db.engine import Database
from paycore.keyring import Keyring, SecretUnreadable
from paycore.kit import actors, ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.clock import to_rfc3339
from paycore.kit.signing import SIGNATURE_HEADER, sign_all
from paycore.lifecycle.policy import Backoff, delay_ms, retry_at_us
from paycore.webhooks import repository, service, states, transport
from paycore.webhooks.models import ERROR_LENGTH, EXCERPT_LENGTH
from paycore.webhooks.types import Delivery, Endpoint

log = logging.getLogger(__name__)
DELIVERY_ID_HEADER = "Paycore-Delivery-Id"
EVENT_ID_HEADER = "Paycore-Event-Id"
_LEASE_MARGIN_MS = 1_000
_ACTOR = actors.worker("deliver_webhooks")


@dataclass(frozen=True)
class Config:
    timeout_ms: int  # one POST, to connect and to answer
    lease_ms: int  # a worker's hold on an endpoint
    batch_max: int  # deliveries per endpoint per turn
    backoff_ms: int  # the first retry's delay (with jitter: half to all of it)
    backoff_max_ms: int
    retry_window_ms: int  # a delivery is retried for this long after its event, then failed
    disable_after_ms: int  # an endpoint failing for this long is disabled
    keyring: Keyring  # opens the endpoints' signing secrets, sealed at rest (ADR 0018)


@dataclass(frozen=True)
class _Turn:
    endpoint: Endpoint
    deliveries: list[tuple[Delivery, Event]]


def _always() -> bool:
    return True


def deliver_due(
    database: Database,
    config: Config,
    worker_id: str,
    *,
    endpoints_max: int,
    keep_going: Callable[[], bool] = _always,
) -> int:
    """One round: claim up to `endpoints_max` endpoints and deliver their due events. Returns
    the attempts made. Before each call `keep_going()` is asked: False (the worker is stopping)
    ends the turn, the endpoint let go of, and what was not sent stays due."""
    now = clock_now_us()
    with database.read() as connection:
        if not repository.any_claimable(connection, now_us=now):
            return 0  # an idle poll: one read, no write transaction
    turns, local_mode = database.transaction(
        partial(_claim, config=config, worker_id=worker_id, now_us=now, endpoints_max=endpoints_max)
    )
    made = 0
    for turn in turns:
        made += _take_turn(database, config, worker_id, turn, local_mode=local_mode, keep_going=keep_going)
    return made


def _claim(
    connection: Connection, *, config: Config, worker_id: str, now_us: int, endpoints_max: int
) -> tuple[list[_Turn], bool]:
    rows = repository.claim_endpoints(
        connection,
        now_us=now_us,
        worker_id=worker_id,
        lease_until_us=now_us + config.lease_ms * 1000,
        limit=endpoints_max,
    )
    turns = []
    for row in rows:
        endpoint = service.endpoint_from_row(row._mapping)
        due = repository.due_deliveries(
            connection, endpoint.tenant_id, endpoint.id, now_us=now_us, limit=config.batch_max
        )
        deliveries = [service.delivery_from_row(found._mapping) for found in due]
        events = audit.get_many(connection, endpoint.tenant_id, sorted({d.event_id for d in deliveries}))
        turns.append(_Turn(endpoint, [(d, events[d.event_id]) for d in deliveries if d.event_id in events]))
    return turns, (service.local_mode(connection) if turns else False)


def _take_turn(
    database: Database,
    config: Config,
    worker_id: str,
    turn: _Turn,
    *,
    local_mode: bool,
    keep_going: Callable[[], bool],
) -> int:
    endpoint = turn.endpoint
    assert endpoint.claimed_until_us is not None
    lease_ends = time.monotonic() + (endpoint.claimed_until_us - clock_now_us()) / 1_000_000
    rng = random.Random()
    made = 0
    failures = endpoint.failures
    try:
        for delivery, event in turn.deliveries:
            if not keep_going():
                break
            if time.monotonic() + call_bound_ms(config.timeout_ms) / 1000 > lease_ends:
                break  # no room for another call in the lease: the next claim takes the rest
            answer = _call(config, endpoint, delivery, event, local_mode=local_mode)
            made += 1
            delivered = answer.status_code is not None and 200 <= answer.status_code < 300
            database.transaction(
                partial(
                    _record,
                    config=config,
                    worker_id=worker_id,
                    endpoint=endpoint,
                    failures=failures,
                    delivery=delivery,
                    answer=answer,
                    delivered=delivered,
                    rng=rng,
                )
            )
            failures = 0 if delivered else failures + 1
            if not delivered:
                break  # the endpoint is failing: its own backoff decides when it is tried again
    finally:
        database.transaction(partial(_release, endpoint=endpoint, worker_id=worker_id))
    return made


def _call(
    config: Config, endpoint: Endpoint, delivery: Delivery, event: Event, *, local_mode: bool
) -> transport.Answer:
    """One signed POST of the event; nothing is sent if the endpoint's secret cannot be opened
    (a key missing from PAYCORE_SECRETS_KEY: an operator's error, recorded as the attempt's)."""
    started_ns = time.monotonic_ns()
    try:
        signing = service.signing_secrets(config.keyring, endpoint, clock_now_us())
    except SecretUnreadable as error:
        log.error(
            "webhook endpoint %s: its signing secret cannot be opened (%s); nothing sent",
            endpoint.id,
            error,
            extra={"event": "webhook_secret_unreadable", "tenant_id": endpoint.tenant_id, "endpoint_id": endpoint.id},
        )
        elapsed_ms = (time.monotonic_ns() - started_ns) // 1_000_000
        return transport.Answer(None, elapsed_ms, "secret_unreadable", str(error))
    body = event_body(event)
    headers = {
        SIGNATURE_HEADER: sign_all(signing, int(time.time()), body),
        DELIVERY_ID_HEADER: delivery.id,
        EVENT_ID_HEADER: event.id,
    }
    return transport.post(endpoint.url, body, headers, timeout_ms=config.timeout_ms, local_mode=local_mode)


def call_bound_ms(timeout_ms: int) -> int:
    """The longest one POST may hold a lease: the transport's whole exchange, and a margin."""
    return transport.EXCHANGE_TIMEOUTS_MAX * timeout_ms + _LEASE_MARGIN_MS


def event_body(event: Event) -> bytes:
    """What an endpoint receives: the event with the object as it was after the change."""
    payload: dict[str, Any] = {
        "id": event.id,
        "object": "event",
        "type": event.type,
        "created_at": to_rfc3339(event.created_at_us),
        "sequence": event.sequence,
        "data": event.snapshot,
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def _record(
    connection: Connection,
    *,
    config: Config,
    worker_id: str,
    endpoint: Endpoint,
    failures: int,
    delivery: Delivery,
    answer: transport.Answer,
    delivered: bool,
    rng: random.Random,
) -> None:
    now = clock_now_us()
    attempt = delivery.attempts + 1
    error = _error_of(answer, delivered)
    repository.insert_attempt(
        connection,
        {
            "tenant_id": delivery.tenant_id,
            "id": ids.new_id("wha"),
            "delivery_id": delivery.id,
            "event_id": delivery.event_id,
            "endpoint_id": delivery.endpoint_id,
            "attempt": attempt,
            "outcome": "delivered" if delivered else "failed",
            "status_code": answer.status_code,
            "latency_ms": answer.latency_ms,
            "error": error,
            "response_excerpt": answer.excerpt[:EXCERPT_LENGTH] or None,
            "worker": worker_id[:64],
            "created_at_us": now,
        },
    )
    values: dict[str, Any] = {
        "attempts": attempt,
        "last_status_code": answer.status_code,
        "last_error": error,
        "updated_at_us": now,
    }
    if delivered:
        values.update(delivered_at_us=now, next_attempt_at_us=None)
        repository.change_delivery(connection, delivery.tenant_id, delivery.id, states.DELIVERED, values)
        if failures:
            repository.update_endpoint(connection, endpoint.tenant_id, endpoint.id, service.healthy_values())
        return
    retry_until_us = delivery.created_at_us + config.retry_window_ms * 1000
    due = retry_at_us(attempt, _backoff(config), rng, now_us=now, until_us=retry_until_us)
    if due is None:  # out of time: the tenant can redeliver
        repository.change_delivery(
            connection, delivery.tenant_id, delivery.id, states.FAILED, {**values, "next_attempt_at_us": None}
        )
    else:
        repository.reschedule_delivery(
            connection, delivery.tenant_id, delivery.id, {**values, "next_attempt_at_us": due}
        )
    _endpoint_failed(connection, config, endpoint, failures + 1, error or "failed", now, rng)


def _endpoint_failed(
    connection: Connection, config: Config, endpoint: Endpoint, failures: int, error: str, now: int, rng: random.Random
) -> None:
    failing_since = endpoint.failing_since_us if endpoint.failing_since_us is not None else now
    values: dict[str, Any] = {
        "failures": failures,
        "failing_since_us": failing_since,
        "last_error": error[:ERROR_LENGTH],
        "blocked_until_us": now + delay_ms(failures, _backoff(config), rng) * 1000,
    }
    repository.update_endpoint(connection, endpoint.tenant_id, endpoint.id, values)
    if now - failing_since >= config.disable_after_ms * 1000 and endpoint.status == states.ENABLED:
        since = to_rfc3339(failing_since)
        reason = {"disabled_reason": f"failing since {since}: {error}"[:ERROR_LENGTH]}
        # A compare-and-set: an endpoint the tenant disabled or deleted meanwhile stays as the tenant left it.
        if service.change_endpoint_status(
            connection, endpoint, states.DISABLED, cause="failing", actor=_ACTOR, now_us=now, values=reason
        ):
            log.warning(
                "webhook endpoint %s disabled: failing since %s",
                endpoint.id,
                since,
                extra={
                    "event": "webhook_endpoint_disabled",
                    "tenant_id": endpoint.tenant_id,
                    "endpoint_id": endpoint.id,
                },
            )


def _release(connection: Connection, *, endpoint: Endpoint, worker_id: str) -> None:
    repository.release_endpoint(connection, endpoint.tenant_id, endpoint.id, worker_id)


def _error_of(answer: transport.Answer, delivered: bool) -> str | None:
    if delivered:
        return None
    if answer.error is not None:
        return answer.error[:ERROR_LENGTH]
    return f"http_{answer.status_code}"


def _backoff(config: Config) -> Backoff:
    """The lifecycle's one backoff with jitter, for a delivery's retries and an endpoint's own wait."""
    return Backoff(first_ms=config.backoff_ms, max_ms=config.backoff_max_ms)
