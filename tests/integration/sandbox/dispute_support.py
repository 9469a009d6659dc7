"""Helpers of the dispute tests: the dispute calls through either transport (in process, or
over HTTP by paycore's `HttpTransport`: a 4xx error body is a refusal, a 5xx or no answer is
unreachable), a charge to dispute, and the outbox's events of one dispute."""

from __future__ import annotations

import dataclasses
import http.client
import json
import urllib.parse
from typing import Any, Protocol

from sqlalchemy import select

from paycore.kit import clock
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import (
    AcceptRequest,
    ChargeRequest,
    ChargeResult,
    DisputeResult,
    EvidenceRequest,
    ProcessorRefused,
    ProcessorUnreachable,
)
from paycore_sandbox import Sandbox
from paycore_sandbox.disputes import OpenDisputeRequest
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.models import webhooks
from tests.integration.sandbox.conftest import Harness

MERCHANT = "merchant_1"
AMOUNT_MINOR = 5_000
CURRENCY = "EUR"
SECOND_US = 1_000_000


class Disputes(Protocol):
    def open_dispute(self, request: OpenDisputeRequest) -> DisputeResult: ...
    def submit_evidence(self, request: EvidenceRequest) -> DisputeResult: ...
    def accept_dispute(self, request: AcceptRequest) -> DisputeResult: ...
    def get_dispute(self, dispute_id: str) -> DisputeResult | None: ...
    def disputes_of_charge(self, charge_request_id: str) -> list[DisputeResult]: ...


class HttpDisputes:
    """The dispute calls over HTTP: paycore's own transport (`HttpTransport`), and the sandbox's
    admin call that opens a dispute (no processor offers that to a merchant)."""

    def __init__(self, base_url: str, timeout_ms: int) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self._host, self._port, self._timeout_s = parts.hostname or "", parts.port, timeout_ms / 1000
        self._transport = HttpTransport(base_url, timeout_ms)

    def open_dispute(self, request: OpenDisputeRequest) -> DisputeResult:
        status, payload = self._exchange("POST", "/v1/sandbox/disputes", dataclasses.asdict(request))
        if status == 200:
            return DisputeResult(**payload)
        if 400 <= status < 500:
            raise ProcessorRefused(payload["error"], payload["message"])
        raise ProcessorUnreachable(f"HTTP {status}")

    def submit_evidence(self, request: EvidenceRequest) -> DisputeResult:
        return self._transport.submit_evidence(request)

    def accept_dispute(self, request: AcceptRequest) -> DisputeResult:
        return self._transport.accept_dispute(request)

    def get_dispute(self, dispute_id: str) -> DisputeResult | None:
        return self._transport.get_dispute(dispute_id)

    def disputes_of_charge(self, charge_request_id: str) -> list[DisputeResult]:
        return self._transport.disputes_of_charge(charge_request_id)

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        try:
            data = None if body is None else json.dumps(body).encode()
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        except (OSError, http.client.HTTPException) as error:
            raise ProcessorUnreachable(str(error)) from error
        finally:
            connection.close()


def disputes_of(harness: Harness, timeout_ms: int = 5_000) -> Disputes:
    if harness.base_url is None:
        return InProcessTransport(harness.sandbox, timeout_ms=timeout_ms)
    return HttpDisputes(harness.base_url, timeout_ms)


def charge(harness: Harness, request_id: str = "pay_1", token: str = "tok_ok", **kwargs: Any) -> ChargeResult:
    return harness.processor.charge(ChargeRequest(request_id, MERCHANT, AMOUNT_MINOR, CURRENCY, token, **kwargs))


def open_one(harness: Harness, request_id: str = "pay_1", **kwargs: Any) -> DisputeResult:
    """A chargeback (or what `kwargs` say) opened by the admin call on a new tok_ok charge."""
    charged = charge(harness, request_id)
    return disputes_of(harness).open_dispute(OpenDisputeRequest(charged.processor_charge_id, **kwargs))


def evidence(dispute: DisputeResult, text: str, request_id: str = "ev_1") -> EvidenceRequest:
    return EvidenceRequest(request_id, MERCHANT, dispute.dispute_id, text)


def accept(dispute: DisputeResult, request_id: str = "ac_1") -> AcceptRequest:
    return AcceptRequest(request_id, MERCHANT, dispute.dispute_id)


def after(seconds: float) -> int:
    """A moment `seconds` from now, for settle_due."""
    return clock.now_us() + int(seconds * SECOND_US)


def event_types(sandbox: Sandbox, dispute_id: str) -> list[str]:
    """The event type of every delivery queued for a dispute, in the order they were queued."""
    statement = (
        select(webhooks.c.event_type)
        .where(webhooks.c.object_type == "dispute", webhooks.c.object_request_id == dispute_id)
        .order_by(webhooks.c.sequence, webhooks.c.delivery_id)
    )
    with sandbox.database.read() as connection:
        return list(connection.execute(statement).scalars())


def refused(call: Any, code: str) -> ProcessorRefused:
    try:
        call()
    except ProcessorRefused as refusal:
        assert refusal.code == code, refusal
        return refusal
    raise AssertionError(f"not refused; expected {code}")
