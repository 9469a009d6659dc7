"""Refused money requests into the audit log (SPEC §11: "every API call result, including
refused schedule requests"), found again by their idempotency key
(`GET /v1/audit_events?idempotency_key=...`).

One mechanism for every money-moving POST (`AUDITED_ROUTES`): a pure ASGI layer that sees the
answer whatever produced it, a domain error raised, a body that failed validation, or a
refusal the idempotency layer recorded and returned. A 4xx answer to one of those routes is
held back until an `api.<operation>` event with outcome `refused` (its status, error code,
message and the request's idempotency key) is written, so a client that reads the audit log
right after its refusal finds it. Not recorded: a replay (`Idempotent-Replayed`: the first
answer was), a 401 (no tenant to record it for), a 402 (a failed payment is a payment, with
its own history), 409 `idempotency_request_in_progress` (not a refusal: retry later), and a
body refused before authentication (`invalid_json`, `duplicate_json_key`: no tenant yet).

A refusal's transaction rolled back (or never started), so the event is written in a
transaction of its own, under an id of its own (`req_...`). Never raises: the refusal is
answered either way."""

from __future__ import annotations

import json
import logging
from typing import Any, Final

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paycore.audit import service as audit
from paycore.config import IDEMPOTENCY_KEY_LENGTH_MAX
from paycore.db.availability import DatabaseUnavailable
from paycore.db.engine import Database
from paycore.kit import ids
from paycore.kit.clock import now_us

log = logging.getLogger(__name__)

# The money-moving POSTs, by route template, and the operation their events are named by
# (`api.<operation>`): credits, the ledger's transfers, payments, refunds and payouts.
AUDITED_ROUTES: Final = {
    "/v1/tenants/{tenant_id}/credits": "credits.create",
    "/v1/transfers": "transfers.create",
    "/v1/transfers/batch": "transfers.batch",
    "/v1/transfers/{transfer_id}/post": "transfers.post",
    "/v1/transfers/{transfer_id}/void": "transfers.void",
    "/v1/transfers/{transfer_id}/reverse": "transfers.reverse",
    "/v1/payments": "payments.create",
    "/v1/payments/{payment_id}/refunds": "refunds.create",
    "/v1/refunds/{refund_id}/approve": "refunds.approve",
    "/v1/refunds/{refund_id}/cancel": "refunds.cancel",
    "/v1/payouts": "payouts.schedule",
    "/v1/payouts/{payout_id}/cancel": "payouts.cancel",
    "/v1/payouts/{payout_id}/adjustments": "payouts.adjust",
}
_NOT_REFUSALS: Final = frozenset({401, 402})
_IN_PROGRESS: Final = "idempotency_request_in_progress"
_REPLAYED: Final = b"idempotent-replayed"


def operation_of(scope: Scope) -> str | None:
    """The audited operation of the route this request matched; None for any other."""
    if scope["method"] != "POST":
        return None
    path = getattr(scope.get("route"), "path", None)
    return AUDITED_ROUTES.get(path) if path is not None else None


class RefusalAudit:
    def __init__(self, app: ASGIApp, database: Database) -> None:
        self.app = app
        self.database = database

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        received: list[bytes] = []  # the body's chunks, for a key that travels in it (credits)
        held: Message | None = None
        chunks: list[bytes] = []

        async def receiving() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                received.append(message.get("body", b""))
            return message

        async def sending(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and held_back(message, scope):
                held = message  # answered once the refusal is in the audit log
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            await anyio.to_thread.run_sync(record, self.database, scope, held["status"], body, b"".join(received))
            await send(held)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receiving, sending)


def record(database: Database, scope: Scope, status: int, body: bytes, request_body: bytes) -> None:
    """The refusal `held_back` held, into the audit log (blocking: on a worker thread)."""
    operation = operation_of(scope)
    known: Any = scope.get("state", {}).get("caller")
    code, message = _error_of(body)
    if operation is None or known is None or code == _IN_PROGRESS:
        return  # nobody authenticated to record it for, or not a refusal
    data = {"error": code, "message": message, "idempotency_key": _key_of(scope, request_body)}
    try:
        database.transaction(
            lambda connection: audit.record_api_call(
                connection,
                known.tenant_id,
                object_type="request",
                object_id=ids.new_id("req"),
                operation=operation,
                status=status,
                outcome="refused",
                actor=known.actor,
                now_us=now_us(),
                data=data,
            )
        )
    except DatabaseUnavailable:
        pass  # the database's own lines tell of the outage; not one more per request
    except Exception:
        log.exception("could not record a refused %s request in the audit log", operation)


def held_back(start: Message, scope: Scope) -> bool:
    """True for the start of an answer to hold back until `record` wrote it: a refusal (4xx, not
    a replay) of an audited route."""
    if not _refusal_status(start):
        return False
    return operation_of(scope) is not None


def _refusal_status(start: Message) -> bool:
    status = int(start["status"])
    if not 400 <= status < 500 or status in _NOT_REFUSALS:
        return False
    return not any(name == _REPLAYED for name, _ in start.get("headers", ()))


def _key_of(scope: Scope, request_body: bytes) -> str | None:
    """The request's idempotency key: its header, else its body's `idempotency_key` (credits).
    Cut to the longest valid key: a refused key may be anything."""
    key: object = None
    for name, value in scope["headers"]:
        if name == b"idempotency-key":
            key = value.decode("latin-1")
            break
    if key is None and request_body:
        try:
            parsed = json.loads(request_body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            key = parsed.get("idempotency_key")
    return (key[:IDEMPOTENCY_KEY_LENGTH_MAX] or None) if isinstance(key, str) else None


def _error_of(body: bytes) -> tuple[str, str]:
    try:
        parsed = json.loads(body)
        return str(parsed.get("error", "refused")), str(parsed.get("message", ""))
    except (ValueError, AttributeError):
        return "refused", ""
