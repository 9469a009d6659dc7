"""Refused requests into the audit log, for the routes whose every result is audited
(SPEC §11: "every API call result, including refused schedule requests").

A refusal's transaction rolled back (or never started: the body failed validation), so the
event is written in a transaction of its own, under an id of its own (`req_...`)."""

from __future__ import annotations

import json
import logging
from typing import Final

from fastapi import Request

from paycore.audit import service as audit
from paycore.db.engine import Database
from paycore.http.errors import status_of
from paycore.kit import ids
from paycore.kit.clock import now_us
from paycore.kit.errors import DomainError

log = logging.getLogger(__name__)
AUDITED_ROUTES: Final = {("POST", "/v1/payouts"): "payouts.schedule"}
_KEY_LENGTH_MAX: Final = 255


def audit_refusal(request: Request, error: DomainError | None, *, status: int | None = None, body: bytes = b"") -> None:
    """Record that the request was refused: from `error`, or from a recorded refusal's
    response (`status`, `body`). Never raises: the refusal is answered either way."""
    operation = AUDITED_ROUTES.get((request.method, request.url.path))
    known = getattr(request.state, "caller", None)
    if operation is None or known is None:
        return  # not an audited route, or nobody authenticated to record it for
    if error is not None:
        status, code, message = status_of(error), error.code, error.message
    else:
        code, message = _error_of(body)
    key = (request.headers.get("idempotency-key") or "")[:_KEY_LENGTH_MAX] or None
    data = {"error": code, "message": message, "idempotency_key": key}
    database: Database = request.app.state.database
    try:
        database.transaction(
            lambda connection: audit.record_api_call(
                connection,
                known.tenant_id,
                object_type="request",
                object_id=ids.new_id("req"),
                operation=operation,
                status=status or 400,
                outcome="refused",
                actor=known.actor,
                now_us=now_us(),
                data=data,
            )
        )
    except Exception:
        log.exception("could not record a refused %s request in the audit log", operation)


def _error_of(body: bytes) -> tuple[str, str]:
    try:
        parsed = json.loads(body)
        return str(parsed.get("error", "refused")), str(parsed.get("message", ""))
    except (ValueError, AttributeError):
        return "refused", ""
