"""Helpers of the authorization tests: a manual charge, its capture and cancel requests, and
the outbox's events of one charge."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from paycore.processor.port import CancelRequest, CaptureRequest, ChargeRequest, ChargeResult
from paycore_sandbox import Sandbox
from paycore_sandbox.models import charge_actions, webhooks
from tests.integration.sandbox.conftest import Harness

MERCHANT = "merchant_1"
AMOUNT_MINOR = 5_000
CURRENCY = "EUR"


def authorization(request_id: str = "pay_1", token: str = "tok_ok", amount_minor: int = AMOUNT_MINOR) -> ChargeRequest:
    return ChargeRequest(request_id, MERCHANT, amount_minor, CURRENCY, token, capture="manual")


def authorize(harness: Harness, request_id: str = "pay_1", token: str = "tok_ok") -> ChargeResult:
    result = harness.processor.charge(authorization(request_id, token))
    assert result.status == "requires_capture", result
    return result


def capture_of(charge: ChargeResult, amount_minor: int, request_id: str = "cap_1") -> CaptureRequest:
    return CaptureRequest(request_id, MERCHANT, charge.processor_charge_id, amount_minor, charge.currency)


def cancel_of(charge: ChargeResult, request_id: str = "can_1") -> CancelRequest:
    return CancelRequest(request_id, MERCHANT, charge.processor_charge_id)


def actions(sandbox: Sandbox) -> int:
    with sandbox.database.read() as connection:
        return int(connection.execute(select(func.count()).select_from(charge_actions)).scalar_one())


def event_types(sandbox: Sandbox, request_id: str = "pay_1") -> list[str]:
    """The event type of every delivery queued for a charge, in the order they were queued."""
    statement = (
        select(webhooks.c.event_type)
        .where(webhooks.c.object_type == "charge", webhooks.c.object_request_id == request_id)
        .order_by(webhooks.c.created_at_us, webhooks.c.sequence)
    )
    with sandbox.database.read() as connection:
        return list(connection.execute(statement).scalars())


def delivered_events(harness: Harness) -> list[dict[str, Any]]:
    harness.sandbox.deliver_due(harness.sink, harness.later_us())
    return harness.sink.events()
