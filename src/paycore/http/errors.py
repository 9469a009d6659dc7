"""Map domain errors to HTTP statuses and render the one error body:
`{"error": code, "message": sentence, "param"?: field}`."""

from __future__ import annotations

import json
import logging
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from paycore.config import IDEMPOTENCY_KEY_LENGTH_MAX
from paycore.db.availability import DatabaseUnavailable, classify
from paycore.db.engine import DatabaseBusy
from paycore.http.routing import allowed_methods, answer_client_disconnects
from paycore.idempotency.errors import IdempotencyRequestInProgress
from paycore.idempotency.service import Outcome, key_problem
from paycore.kit.errors import BusinessRefusal, Conflict, DomainError, Forbidden, InvalidRequest, NotFound
from paycore.tenants.errors import Unauthorized

log = logging.getLogger(__name__)

_STATUS_BY_CLASS: tuple[tuple[type[DomainError], int], ...] = (
    (InvalidRequest, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (BusinessRefusal, 422),
)
# Details a client can act on, added to the error body when an error carries them.
_DETAILS_SHOWN = ("status", "refundable_minor", "owner_id", "payment", "dispute")
# How long a client is asked to wait before it retries an answer about the database itself:
# a busy database frees up within a lock wait; one that went away takes longer to come back.
RETRY_AFTER_BUSY_S = 1
RETRY_AFTER_UNAVAILABLE_S = 2


def status_of(error: DomainError) -> int:
    for cls, status in _STATUS_BY_CLASS:
        if isinstance(error, cls):
            return status
    raise AssertionError(f"no HTTP status for {type(error).__name__}")


def error_body(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": code, "message": message}
    if param is not None:
        body["param"] = param
    return body


# `json.dumps(payload, separators=(",", ":"), ensure_ascii=False)` without making its encoder for
# each answer (every money answer and refusal is encoded here); `encode` keeps no state.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(payload: Any) -> str:
    return _ENCODER.encode(payload)


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(payload), status_code=status, media_type="application/json", headers=headers)


def render_refusal(error: DomainError) -> Outcome:
    body = error_body(error.code, error.message, error.param)
    for name in _DETAILS_SHOWN:
        if name in error.details:
            body[name] = error.details[name]
    return Outcome(status=status_of(error), body=dumps(body))


def domain_error_response(error: DomainError) -> Response:
    outcome = render_refusal(error)
    headers = {}
    if isinstance(error, IdempotencyRequestInProgress):
        headers["Retry-After"] = str(error.details.get("retry_after_s", 1))
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return Response(outcome.body, status_code=outcome.status, media_type="application/json", headers=headers)


def retry_later(code: str, message: str, retry_after_s: int, **details: str) -> Response:
    """503 with `Retry-After`: the database could not serve the request now; nothing was done
    (or, with `commit_outcome: unknown`, the client cannot know and retries with its key)."""
    body = error_body(code, message)
    body.update(details)
    return json_response(503, body, headers={"Retry-After": str(retry_after_s)})


def busy_response() -> Response:
    return retry_later("database_busy", "the database is busy; retry shortly", RETRY_AFTER_BUSY_S)


def unavailable_response(error: DatabaseUnavailable) -> Response:
    if error.commit_outcome_unknown:
        message = (
            "the connection to the database was lost while this request was being committed: it may or may not "
            "have taken effect; retry with the same Idempotency-Key to get its one result"
        )
        return retry_later("database_unavailable", message, RETRY_AFTER_UNAVAILABLE_S, commit_outcome="unknown")
    message = "the database is unavailable; nothing was done: retry shortly (with the same Idempotency-Key, if any)"
    return retry_later("database_unavailable", message, RETRY_AFTER_UNAVAILABLE_S)


def _param(location: tuple[Any, ...]) -> str | None:
    parts = [part for part in location if part not in ("body", "query", "path", "header")]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or None


def validation_error(errors: list[dict[str, Any]]) -> DomainError:
    """Turn the first of Pydantic's errors into one of our stable codes."""
    first = errors[0]
    kind = first.get("type", "")
    location = tuple(first.get("loc", ()))
    names = [part for part in location if isinstance(part, str)]
    param = _param(location)
    if kind == "json_invalid":
        return _coded("invalid_json", "the request body is not valid JSON")
    if location == ("body",) and kind == "missing":
        return _coded("invalid_request", "a JSON request body is required")
    message = f"{param}: {first.get('msg', 'invalid')}" if param else str(first.get("msg", "invalid"))
    if names and names[-1].endswith("amount_minor"):
        return _coded("invalid_amount", f"{param} must be a positive JSON integer up to 2^53-1", param)
    if names and names[-1].endswith("threshold_minor"):
        return _coded("invalid_amount", f"{param} must be null or a JSON integer from 0 to 2^53-1", param)
    if "idempotency_key" in names:
        return _coded("invalid_idempotency_key", _key_message(kind, first.get("input"), param), param)
    if names and names[-1] == "starting_after":
        return _coded("invalid_starting_after", "starting_after must be an id of 1 to 64 characters", param)
    if names and names[-1] == "currency":
        return _coded("unsupported_currency", message, param)
    return _coded("invalid_request", message, param)


def _key_message(kind: str, value: object, param: str | None) -> str:
    name = param or "idempotency_key"
    if kind == "missing":
        return f"{name} is required: it must be 1-{IDEMPOTENCY_KEY_LENGTH_MAX} printable ASCII characters"
    problem = key_problem(value, name=name)
    if problem is None:  # Pydantic refused what our rule accepts: say the rule anyway
        return f"{name} must be 1-{IDEMPOTENCY_KEY_LENGTH_MAX} printable ASCII characters"
    return problem


def _coded(code: str, message: str, param: str | None = None) -> DomainError:
    error = InvalidRequest(message, param=param)
    error.code = code
    return error


def install(app: FastAPI) -> None:
    answer_client_disconnects(app)

    @app.exception_handler(DomainError)
    async def _domain(_request: Request, error: DomainError) -> Response:
        return domain_error_response(error)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, error: RequestValidationError) -> Response:
        # A refused money request is audited by paycore.http.refusals, whatever refused it.
        return domain_error_response(validation_error(list(error.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> Response:
        headers = dict(error.headers or {})
        if error.status_code == 404:
            return json_response(404, error_body("not_found", "no such route"), headers)
        if error.status_code == 405:
            # RFC 9110: a 405 lists every method the path serves. Starlette's own `Allow`
            # names only the first route it matched, and a path may have one route per method.
            headers["Allow"] = ", ".join(allowed_methods(request))
            body = error_body("method_not_allowed", "method not allowed on this route")
            return json_response(405, body, headers)
        return json_response(error.status_code, error_body("http_error", str(error.detail)), headers)

    @app.exception_handler(DatabaseBusy)
    async def _busy(_request: Request, _error: DatabaseBusy) -> Response:
        return busy_response()

    @app.exception_handler(DatabaseUnavailable)
    async def _unavailable(_request: Request, error: DatabaseUnavailable) -> Response:
        return unavailable_response(error)  # the outage's one log line is the database's

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> Response:
        unavailable = classify(error)  # a driver error that reached here without `Database`
        if unavailable is not None:
            return unavailable_response(unavailable)
        log.exception(
            "unhandled error on %s %s",
            request.method,
            request.url.path,
            extra={"event": "unhandled_error", "method": request.method, "error_type": type(error).__name__},
        )
        return json_response(500, error_body("internal_error", "an internal error occurred"))
