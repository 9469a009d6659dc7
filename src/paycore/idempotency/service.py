"""Idempotency keys (SPEC §3.1), as one piece every money-moving POST uses.

Design (docs/adr/0004-idempotency.md): the key row is claimed with
`INSERT ... ON CONFLICT DO NOTHING` *inside the same transaction as the effect it guards*,
and the response is written to it before that transaction commits. So:

- the effect and its key commit together or not at all: a crash or a rolled-back request
  leaves no key behind, and the same key can be retried;
- two requests with one key never both execute. On PostgreSQL the second one's INSERT
  waits on the first's uncommitted row (bounded by lock_timeout, default 10 s) and then
  finds the committed key and replays it; on SQLite the write transaction is serialised
  at `BEGIN IMMEDIATE`. No in-process lock is involved, so this holds across processes;
- a business refusal (a recorded `DomainError`) rolls back the effect to a savepoint, and
  the refusal is recorded as the key's response, so a retry replays the same refusal.

The stored response is opaque (a status integer and a body string) so this module knows
nothing of HTTP.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.config import IDEMPOTENCY_KEY_LENGTH_MAX
from paycore.db.engine import is_lock_timeout
from paycore.idempotency import repository
from paycore.idempotency.errors import (
    IdempotencyKeyReused,
    IdempotencyRequestInProgress,
    InvalidIdempotencyKey,
)
from paycore.kit.errors import DomainError


@dataclass(frozen=True)
class Outcome:
    status: int
    body: str


def check_key(key: object, *, param: str = "Idempotency-Key") -> str:
    """1-255 printable ASCII characters (0x20-0x7E)."""
    if (
        not isinstance(key, str)
        or not 1 <= len(key) <= IDEMPOTENCY_KEY_LENGTH_MAX
        or not all(" " <= char <= "~" for char in key)
    ):
        raise InvalidIdempotencyKey(
            f"the idempotency key must be 1-{IDEMPOTENCY_KEY_LENGTH_MAX} printable ASCII characters",
            param=param,
        )
    return key


def fingerprint(method: str, path: str, body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256()
    digest.update(f"{method.upper()}\n{path}\n".encode())
    digest.update(canonical.encode())
    return digest.hexdigest()


def execute(
    connection: Connection,
    *,
    tenant_id: str,
    key: str,
    request_fingerprint: str,
    now_us: int,
    expires_at_us: int | None,
    effect: Callable[[Connection], Outcome],
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """Run `effect` once per (tenant, key). Returns (outcome, replayed)."""
    values = {
        "tenant_id": tenant_id,
        "key": key,
        "fingerprint": request_fingerprint,
        "response_status": None,
        "response_body": None,
        "created_at_us": now_us,
        "expires_at_us": expires_at_us,
    }
    try:
        claimed = repository.claim(connection, values)
    except DBAPIError as error:
        if is_lock_timeout(error):
            raise IdempotencyRequestInProgress(
                "a request with this idempotency key is still being processed; retry later",
                retry_after_s=1,
            ) from error
        raise
    if not claimed:
        return _replay(connection, tenant_id, key, request_fingerprint), True
    try:
        with connection.begin_nested():
            outcome = effect(connection)
    except DomainError as error:
        if not error.recorded:
            raise  # validation-type errors roll the whole transaction back: the key stays free
        outcome = render_refusal(error)
    repository.record_response(connection, tenant_id, key, outcome.status, outcome.body)
    return outcome, False


def _replay(connection: Connection, tenant_id: str, key: str, request_fingerprint: str) -> Outcome:
    row = repository.get(connection, tenant_id, key)
    assert row is not None, "a key that conflicted on insert exists once its writer committed"
    if row.fingerprint != request_fingerprint:
        raise IdempotencyKeyReused(
            "this idempotency key was already used with a different request",
            param="idempotency_key",
        )
    assert row.response_status is not None, "keys commit together with their response"
    return Outcome(status=row.response_status, body=row.response_body)


def prune(connection: Connection, *, now_us: int, limit: int) -> int:
    """Delete up to `limit` keys past their retention (keys kept forever have no expiry)."""
    return repository.delete_expired(connection, now_us, limit)
