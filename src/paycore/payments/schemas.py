"""The payments API shapes: the strict request model and the JSON of a payment.

`creation_outcome` is the response a `POST /v1/payments` answers (and replays) for a payment
in a given state. It lives here, not in `http/`, because the transaction that first settles a
payment's answer may be a webhook's or the resolver's, and it records that response for the
original request's idempotency key in the same transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

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


# Status code of the creation response, by the state the payment's answer settled in.
_CREATION_STATUS = {states.SUCCEEDED: 201, states.FAILED: 402, states.IN_DOUBT: 202, states.PROCESSING: 202}
_FAILURE_MESSAGES = {
    "card_declined": "the card was declined",
    "insufficient_funds": "the card has insufficient funds",
}


def payment_object(payment: Payment) -> dict[str, Any]:
    """The payment without its history: the snapshot its published events carry."""
    refundable = payment.amount_minor - payment.refunded_minor if payment.status == states.SUCCEEDED else 0
    return {
        "id": payment.id,
        "object": "payment",
        "amount_minor": payment.amount_minor,
        "currency": payment.currency,
        "status": payment.status,
        "refunded_minor": payment.refunded_minor,
        "refundable_minor": refundable,
        "failure_code": payment.failure_code,
        "processor_reference": payment.processor_reference,
        "source": {"type": payment.source_type},
        "destination_account": payment.destination_account_id,
        "description": payment.description,
        "metadata": payment.metadata,
        "created_at": to_rfc3339(payment.created_at_us),
        "updated_at": to_rfc3339(payment.updated_at_us),
    }


def payment_json(payment: Payment, history: Sequence[HistoryItem]) -> dict[str, Any]:
    """The payment with its state changes (oldest first), last."""
    return {**payment_object(payment), "history": history_json(history)}


def creation_outcome(payment: Payment, history: Sequence[HistoryItem]) -> Outcome:
    """201 succeeded, 402 failed (a decline: the payment plus the error fields), 202 otherwise."""
    body = payment_json(payment, history)
    if payment.status == states.FAILED:
        code = payment.failure_code or "payment_failed"
        body = {"error": code, "message": _FAILURE_MESSAGES.get(code, f"the payment failed: {code}"), **body}
    return Outcome(
        status=_CREATION_STATUS[payment.status], body=json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    )
