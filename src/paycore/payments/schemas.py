"""The payments API shapes: the strict request model and the JSON of a payment.

`creation_outcome` is the response a `POST /v1/payments` answers (and replays) for a payment
in a given state. It lives here, not in `http/`, because the transaction that first settles a
payment's answer may be a webhook's or the resolver's, and it records that response for the
original request's idempotency key in the same transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final, Literal

from pydantic import Field

from paycore.audit.schemas import HistoryItem, history_json
from paycore.idempotency.service import Outcome
from paycore.kit.clock import to_rfc3339
from paycore.payments import states
from paycore.payments.types import Payment
from paycore.schemas import AmountMinor, Currency, Id, Metadata, StrictModel

# The bounds below are also the thin edge's (paycore.http.money.payments), which must accept no more.
DESCRIPTION_LENGTH_MAX = 1000
TOKEN_LENGTH_MAX = 255
HISTORY_LENGTH_MAX = 100


class Source(StrictModel):
    type: Literal["card"]
    token: str = Field(min_length=1, max_length=TOKEN_LENGTH_MAX)


class PaymentCreate(StrictModel):
    amount_minor: AmountMinor
    currency: Currency
    source: Source
    destination_account: Id
    description: str | None = Field(default=None, max_length=DESCRIPTION_LENGTH_MAX)
    metadata: Metadata = Field(default_factory=dict)
    capture: Literal["automatic", "manual"] = "automatic"


def _left_out_not_null(schema: dict[str, Any]) -> None:
    """The field may be left out, never null (SPEC §2: null is 400 `invalid_amount`; the route
    refuses it): the document says so."""
    for choice in schema.pop("anyOf", []):
        if choice.get("type") != "null":
            schema.update(choice)
    schema.pop("default", None)


class PaymentCapture(StrictModel):
    """`POST /v1/payments/{id}/capture`: omitted `amount_minor` captures all that is capturable."""

    amount_minor: AmountMinor | None = Field(default=None, json_schema_extra=_left_out_not_null)


# Status code of the creation response, by the state the payment's answer settled in.
_CREATION_STATUS = {
    states.SUCCEEDED: 201,
    states.REQUIRES_CAPTURE: 201,
    states.CANCELED: 201,  # authorized, then expired before its answer was recorded
    states.FAILED: 402,
    states.IN_DOUBT: 202,
    states.PROCESSING: 202,
}
# `json.dumps(body, separators=(",", ":"), ensure_ascii=False)` without making its encoder for
# each answer; `encode` keeps no state between calls.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_FAILURE_MESSAGES = {
    "card_declined": "the card was declined",
    "insufficient_funds": "the card has insufficient funds",
}


def payment_object(payment: Payment) -> dict[str, Any]:
    """The payment without its history: the snapshot its published events carry."""
    captured, capturable = captured_minor(payment), capturable_minor(payment)
    refundable = captured - payment.refunded_minor - payment.disputed_minor if payment.status == states.SUCCEEDED else 0
    return {
        "id": payment.id,
        "object": "payment",
        "amount_minor": payment.amount_minor,
        "currency": payment.currency,
        "status": payment.status,
        "refunded_minor": payment.refunded_minor,
        "refundable_minor": max(refundable, 0),
        "disputed_minor": payment.disputed_minor,
        "failure_code": payment.failure_code,
        "processor_reference": payment.processor_reference,
        "capture": payment.capture_method,
        "amount_capturable_minor": capturable,
        "amount_captured_minor": captured,
        "authorization_expires_at": _time(payment.authorization_expires_at_us),
        "cancellation_reason": payment.cancellation_reason,
        "in_doubt_operation": in_doubt_operation(payment),
        "source": {"type": payment.source_type},
        "destination_account": payment.destination_account_id,
        "description": payment.description,
        "metadata": payment.metadata,
        "created_at": to_rfc3339(payment.created_at_us),
        "updated_at": to_rfc3339(payment.updated_at_us),
    }


def captured_minor(payment: Payment) -> int:
    """What was captured: all of an automatic payment that succeeded, what the processor said
    of a manual one (what a confirmed manual resolution asked for, when it said nothing)."""
    if payment.status != states.SUCCEEDED:
        return 0
    if not payment.is_manual:
        return payment.amount_minor
    captured = payment.amount_captured_minor or payment.capture_requested_minor or payment.amount_minor
    assert 0 < captured <= payment.amount_minor, payment
    return captured


def capturable_minor(payment: Payment) -> int:
    """What a capture may take now: a manual payment's open authorization, else 0."""
    if payment.status != states.REQUIRES_CAPTURE:
        return 0
    assert payment.amount_capturable_minor is not None, payment
    return payment.amount_capturable_minor


def in_doubt_operation(payment: Payment) -> str | None:
    """The call whose outcome is unknown, for a payment in doubt (SPEC §6.1)."""
    if payment.status != states.IN_DOUBT:
        return None
    if payment.operation is not None:
        return payment.operation
    return "authorize" if payment.is_manual else "charge"


def _time(us: int | None) -> str | None:
    return None if us is None else to_rfc3339(us)


def payment_json(payment: Payment, history: Sequence[HistoryItem]) -> dict[str, Any]:
    """The payment with its state changes (oldest first), last."""
    return {**payment_object(payment), "history": history_json(history)}


def creation_outcome(payment: Payment, history: Sequence[HistoryItem]) -> Outcome:
    """201 succeeded, 402 failed (a decline: the payment plus the error fields), 202 otherwise."""
    body = payment_json(payment, history)
    if payment.status == states.FAILED:
        code = payment.failure_code or "payment_failed"
        body = {"error": code, "message": _FAILURE_MESSAGES.get(code, f"the payment failed: {code}"), **body}
    return Outcome(status=_CREATION_STATUS[payment.status], body=_ENCODER.encode(body))


def operation_outcome(payment: Payment, *, refused_by: str | None = None) -> Outcome:
    """The answer of a capture or cancel request, by the state its call settled the payment in:
    200 captured (canceled), 202 in doubt or still in flight; 409 with the payment when the
    processor refused the call (it did nothing) or proved another outcome (an expiry, the other
    operation)."""
    operation = refused_by or payment.operation
    assert operation in (states.CAPTURE, states.CANCEL), payment
    proved = states.SUCCEEDED if operation == states.CAPTURE else states.CANCELED
    body = payment_object(payment)
    if refused_by is None and payment.status in (states.PROCESSING, states.IN_DOUBT):
        return Outcome(status=202, body=_dumps(body))
    if refused_by is None and payment.status == proved:
        return Outcome(status=200, body=_dumps(body))
    code = "payment_not_capturable" if operation == states.CAPTURE else "payment_not_cancelable"
    message = f"the payment is {payment.status}: the {operation} did not happen"
    return Outcome(status=409, body=_dumps({"error": code, "message": message, "payment": body}))


def _dumps(body: dict[str, Any]) -> str:
    return _ENCODER.encode(body)
