"""The sandbox processor over HTTP (`paycore processor serve`).

The fault plan is applied here as a network would: a dropped request or answer is held for
`hold_ms` (bounded) and then answered 504, `error_500` is answered 500 without processing,
`delay_ms` processes and answers after the delay. Errors are `{"error": code, "message": ...}`:
400 for a bad request (`duplicate_json_key`, with `param`, for a body that repeats a key), 401
for an admin endpoint without the admin token (paycore_sandbox.admin), 404 for an unknown
request id on GET, 409 for a reused request id (and for the file of a batch still open, and a
capture or cancel of an authorization that is closed or expired: `charge_not_capturable`,
`charge_not_cancelable`, `authorization_expired`), 413
and 415 for a body too large or not JSON, 422 for the other refusals (over_refund,
charge_not_found, ...), 503 when busy. The batch endpoints are for looking, like the
settlement report: the fault plan does not apply to them.

Endpoints are plain `def`s (run on the threadpool), like paycore's own (ADR 0002); a hold or a
delay occupies one thread of the pool for its duration.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Final

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from paycore.db.engine import DatabaseBusy
from paycore.http.middleware import BodyLimit
from paycore.http.routing import JsonRoute, allowed_methods, answer_client_disconnects, assert_json_routes
from paycore.kit.errors import DuplicateJsonKey
from paycore.processor.port import ProcessorRefused
from paycore_sandbox.admin import AdminTokenRequired, admin_dependencies
from paycore_sandbox.charge_edge import ChargeEdge
from paycore_sandbox.faults import Decision, FaultPlanError
from paycore_sandbox.limits import BODY_BYTES_MAX
from paycore_sandbox.schemas import (
    AcceptBody,
    CancelBody,
    CaptureBody,
    ChargeBody,
    EvidenceBody,
    OpenDisputeBody,
    PayoutBody,
    RefundBody,
    render,
)
from paycore_sandbox.service import Sandbox
from paycore_sandbox.sink import WebhookSink

_BAD_REQUEST_CODES: Final = frozenset(
    {"invalid_request", "invalid_amount", "invalid_currency", "invalid_token", "invalid_day", "invalid_account"}
)
_CONFLICT_CODES: Final = frozenset(
    {
        "request_id_reused",
        "batch_open",
        "charge_not_capturable",
        "charge_not_cancelable",
        "authorization_expired",
        "charge_not_disputable",
        "charge_already_disputed",
        "dispute_not_open",
    }
)
_NOT_FOUND_CODES: Final = frozenset({"dispute_not_found"})
_ACCOUNT_FIELDS: Final = frozenset({"iban", "bic", "routing_number", "account_number"})
log = logging.getLogger(__name__)
_MESSAGE_LENGTH_MAX: Final = 1000
Answer = tuple[int, Any]


def json_response(status: int, payload: Any) -> Response:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return Response(body, status_code=status, media_type="application/json")


def error_response(status: int, code: str, message: str) -> Response:
    return json_response(status, {"error": code, "message": message})


def refusal_status(code: str) -> int:
    if code in _BAD_REQUEST_CODES:
        return 400
    if code in _CONFLICT_CODES:
        return 409
    if code in _NOT_FOUND_CODES:
        return 404
    return 422


def create_app(
    sandbox: Sandbox,
    sink: WebhookSink | None = None,
    *,
    admin_token: str | None = None,
    body_bytes_max: int = BODY_BYTES_MAX,
    charge_edge: bool = True,
) -> FastAPI:
    """The sandbox's FastAPI app; `sink` is where `POST /v1/sandbox/webhooks/deliver` sends.
    With `admin_token`, the endpoints that change the sandbox require it (paycore_sandbox.admin).

    It shares paycore's HTTP edge rather than copying it: the body bound (`BodyLimit`: 413
    `request_too_large`, 415 for a body that is not JSON), bodies read by `strict_json` (a
    repeated key is 400 `duplicate_json_key`), and, served by `paycore processor serve`,
    paycore's `Server` (431, 408, 503 `server_busy`; ADR 0013). `POST /v1/charges` is served
    in one pass by `charge_edge.ChargeEdge` (the same answers; `charge_edge=False`: by its
    FastAPI route alone, as tests compare)."""
    # A trailing slash is a 404, never a redirect built from the Host header (as paycore, ADR 0013).
    app = FastAPI(title="paycore sandbox processor", version="1", redirect_slashes=False)
    app.router.route_class = JsonRoute  # bodies read by paycore's strict reader: a repeated key is refused
    # Read by paycore.http.server.check_app_bind: served off loopback only with a token.
    app.state.admin_token = admin_token
    _add_error_handlers(app)
    _add_processor_routes(app, sandbox)
    _add_bank_routes(app, sandbox)
    admin = admin_dependencies(admin_token)
    _add_dispute_routes(app, sandbox, admin)
    _add_sandbox_routes(app, sandbox, sink, admin)
    assert_json_routes(app)
    if charge_edge:  # inside BodyLimit: what it refuses never reaches the edge
        app.add_middleware(ChargeEdge, sandbox=sandbox, respond=_respond)
    app.add_middleware(BodyLimit, body_bytes_max=body_bytes_max)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    answer_client_disconnects(app)

    @app.exception_handler(RequestValidationError)
    def _invalid(_request: Request, error: RequestValidationError) -> Response:
        details = error.errors()
        fields = ["/".join(str(part) for part in detail["loc"] if part != "body") or "body" for detail in details]
        problems = [f"{field}: {detail['msg']}" for field, detail in zip(fields, details, strict=True)]
        # The same codes as the service's own checks, so both transports refuse alike.
        amount_wrong = any(
            field == "amount_minor" and detail["type"] != "missing"
            for field, detail in zip(fields, details, strict=True)
        )
        account_wrong = any(field in _ACCOUNT_FIELDS for field in fields)
        code = "invalid_amount" if amount_wrong else "invalid_account" if account_wrong else "invalid_request"
        return error_response(400, code, "; ".join(problems)[:_MESSAGE_LENGTH_MAX])

    @app.exception_handler(DuplicateJsonKey)
    def _duplicate(_request: Request, error: DuplicateJsonKey) -> Response:
        return json_response(400, {"error": error.code, "message": error.message, "param": error.param})

    @app.exception_handler(AdminTokenRequired)
    def _admin(_request: Request, _error: AdminTokenRequired) -> Response:
        response = error_response(401, "unauthorized", "this endpoint needs Authorization: Bearer <admin token>")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    @app.exception_handler(DatabaseBusy)
    def _busy(_request: Request, error: DatabaseBusy) -> Response:
        return error_response(503, "database_busy", str(error))

    @app.exception_handler(Exception)
    def _unexpected(_request: Request, error: Exception) -> Response:
        log.error("sandbox request failed", exc_info=error)
        return error_response(
            500, "internal_error", "the sandbox failed unexpectedly; the request may have been processed"
        )

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, error: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
        response = error_response(error.status_code, code, str(error.detail))
        if error.status_code == 405:
            response.headers["Allow"] = ", ".join(allowed_methods(request))
        return response


def _respond(
    sandbox: Sandbox, decision: Decision, work: Callable[[], Answer], *, answer_lost: bool = False
) -> Response:
    """Process (or not) and answer (or not), as `decision` says."""
    if decision.transport == "drop_request":
        sandbox.hold(decision.hold_ms)
        return error_response(504, "gateway_timeout", "the request was lost (sandbox fault drop_request)")
    if decision.transport == "error_500":
        return error_response(500, "internal_error", "sandbox fault error_500: nothing was processed")
    try:
        status, payload = work()
    except ProcessorRefused as refusal:
        status, payload = refusal_status(refusal.code), {"error": refusal.code, "message": str(refusal)}
        answer_lost = False
    except DatabaseBusy as error:
        return error_response(503, "database_busy", str(error))
    if decision.transport == "drop_response" or answer_lost:
        sandbox.hold(decision.hold_ms)
        return error_response(504, "gateway_timeout", "the answer was lost (the request was processed)")
    if decision.transport == "delay_ms":
        time.sleep(decision.delay_ms / 1000)
    return json_response(status, payload)


def _add_processor_routes(app: FastAPI, sandbox: Sandbox) -> None:
    @app.post("/v1/charges")
    def create_charge(body: ChargeBody) -> Response:
        request = body.to_request()
        decision = sandbox.decide("charge")
        return _respond(
            sandbox,
            decision,
            lambda: (200, render(sandbox.charge(request, decision))),
            answer_lost=sandbox.answer_lost(request),
        )

    @app.post("/v1/captures")
    def capture(body: CaptureBody) -> Response:
        request = body.to_request()
        decision = sandbox.decide("capture")
        return _respond(sandbox, decision, lambda: (200, render(sandbox.capture(request, decision))))

    @app.post("/v1/cancellations")
    def cancel(body: CancelBody) -> Response:
        request = body.to_request()
        decision = sandbox.decide("cancel")
        return _respond(sandbox, decision, lambda: (200, render(sandbox.cancel(request, decision))))

    @app.get("/v1/charges/{request_id:path}")
    def get_charge(request_id: str) -> Response:
        def work() -> Answer:
            result = sandbox.get_charge(request_id)
            if result is None:
                return 404, {"error": "not_found", "message": f"no charge with request id {request_id!r}"}
            return 200, render(result)

        return _respond(sandbox, sandbox.decide("get_charge"), work)

    @app.post("/v1/refunds")
    def create_refund(body: RefundBody) -> Response:
        request = body.to_request()
        decision = sandbox.decide("refund")
        return _respond(sandbox, decision, lambda: (200, render(sandbox.refund(request, decision))))

    @app.get("/v1/refunds/{request_id:path}")
    def get_refund(request_id: str) -> Response:
        def work() -> Answer:
            result = sandbox.get_refund(request_id)
            if result is None:
                return 404, {"error": "not_found", "message": f"no refund with request id {request_id!r}"}
            return 200, render(result)

        return _respond(sandbox, sandbox.decide("get_refund"), work)

    @app.get("/v1/settlements/{day}.csv")
    def settlement_report(day: str) -> Response:
        try:
            lines = sandbox.settlement_report(day)
        except ProcessorRefused as refusal:
            return error_response(refusal_status(refusal.code), refusal.code, str(refusal))
        return StreamingResponse(lines, media_type="text/csv; charset=utf-8")


def _add_bank_routes(app: FastAPI, sandbox: Sandbox) -> None:
    @app.post("/v1/payouts")
    def create_payout(body: PayoutBody) -> Response:
        request = body.to_request()
        decision = sandbox.decide("payout")
        return _respond(sandbox, decision, lambda: (200, render(sandbox.send_payout(request, decision))))

    @app.get("/v1/payouts/{request_id:path}")
    def get_payout(request_id: str) -> Response:
        def work() -> Answer:
            result = sandbox.get_payout(request_id)
            if result is None:
                return 404, {"error": "not_found", "message": f"no payout with request id {request_id!r}"}
            return 200, render(result)

        return _respond(sandbox, sandbox.decide("get_payout"), work)

    @app.get("/v1/batches/{batch_id}/file")
    def get_batch_file(batch_id: str) -> Response:
        try:
            found = sandbox.batch_file(batch_id)
        except ProcessorRefused as refusal:
            return error_response(refusal_status(refusal.code), refusal.code, str(refusal))
        if found is None:
            return error_response(404, "not_found", f"no batch {batch_id!r}")
        disposition = f'inline; filename="{found.filename}"'
        return Response(found.content, media_type=found.media_type, headers={"Content-Disposition": disposition})

    @app.get("/v1/batches/{batch_id}")
    def get_batch(batch_id: str) -> Response:
        found = sandbox.batch(batch_id)
        if found is None:
            return error_response(404, "not_found", f"no batch {batch_id!r}")
        return json_response(200, found)


def _add_dispute_routes(app: FastAPI, sandbox: Sandbox, admin: list[Any]) -> None:
    """Disputes (disputes.py): the merchant's calls, and the admin call that opens one."""

    @app.post("/v1/sandbox/disputes", dependencies=admin)
    def open_dispute(body: OpenDisputeBody) -> Response:
        request = body.to_request()
        decision = sandbox.decide("dispute_open")
        return _respond(sandbox, decision, lambda: (200, asdict(sandbox.open_dispute(request, decision))))

    @app.post("/v1/disputes/{dispute_id}/evidence")
    def submit_evidence(dispute_id: str, body: EvidenceBody) -> Response:
        request = body.to_request(dispute_id)
        decision = sandbox.decide("dispute_evidence")
        return _respond(sandbox, decision, lambda: (200, asdict(sandbox.submit_evidence(request, decision))))

    @app.post("/v1/disputes/{dispute_id}/accept")
    def accept_dispute(dispute_id: str, body: AcceptBody) -> Response:
        request = body.to_request(dispute_id)
        decision = sandbox.decide("dispute_accept")
        return _respond(sandbox, decision, lambda: (200, asdict(sandbox.accept_dispute(request, decision))))

    @app.get("/v1/disputes/{dispute_id}")
    def get_dispute(dispute_id: str) -> Response:
        def work() -> Answer:
            result = sandbox.get_dispute(dispute_id)
            if result is None:
                return 404, {"error": "not_found", "message": f"no dispute {dispute_id!r}"}
            return 200, asdict(result)

        return _respond(sandbox, sandbox.decide("get_dispute"), work)

    @app.get("/v1/disputes")
    def list_disputes(charge_request_id: str) -> Response:
        def work() -> Answer:
            return 200, {"data": [asdict(found) for found in sandbox.disputes_of_charge(charge_request_id)]}

        return _respond(sandbox, sandbox.decide("get_dispute"), work)


def _add_sandbox_routes(app: FastAPI, sandbox: Sandbox, sink: WebhookSink | None, admin: list[Any]) -> None:
    @app.get("/healthz")
    def healthz() -> Response:
        return json_response(200, {"status": "ok"})

    @app.get("/v1/sandbox/faults")
    def get_faults() -> Response:
        return json_response(200, sandbox.fault_plan())

    @app.put("/v1/sandbox/faults", dependencies=admin)
    def put_faults(plan: dict[str, Any] = Body(...)) -> Response:
        try:
            sandbox.set_fault_plan(plan)
        except FaultPlanError as error:
            return error_response(400, "invalid_fault_plan", str(error))
        return json_response(200, sandbox.fault_plan())

    @app.delete("/v1/sandbox/faults", dependencies=admin)
    def delete_faults() -> Response:
        sandbox.clear_fault_plan()
        return json_response(200, sandbox.fault_plan())

    @app.post("/v1/sandbox/webhooks/deliver", dependencies=admin)
    def deliver_webhooks() -> Response:
        if sink is None:
            return error_response(409, "no_webhook_sink", "this sandbox was started without a webhook url")
        settled = sandbox.settle_due()
        delivered = sandbox.deliver_due(sink)
        return json_response(200, {"settled": settled, "delivered": delivered})
