"""The processor's events (SPEC §10) as paycore reads them: checked (the signature, its
timestamp, the shape, a status the event's object can have) before anything else, and turned
into the port's result types, the evidence each domain's lifecycle takes. Read by the reference
path (`service.receive`, `matching.py`) and by the data plane's (`receive.py`, `apply_*.py`).
"""

from __future__ import annotations

from typing import Final, cast

from pydantic import ValidationError

from paycore.inbound.schemas import EventData, ProcessorEvent
from paycore.kit import signing, strict_json
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.clock import parse_rfc3339
from paycore.kit.errors import InvalidRequest
from paycore.processor.port import (
    CHARGE_STATUSES,
    DISPUTE_STATUSES,
    PAYOUT_STATUSES,
    RESULT_STATUSES,
    ChargeResult,
    ChargeStatus,
    PayoutResult,
    RefundResult,
    ResultStatus,
)

# What an event about each kind of object may say (a charge: an authorization's statuses too).
_STATUSES: Final[dict[str, tuple[str, ...]]] = {
    "charge": CHARGE_STATUSES,
    "refund": RESULT_STATUSES,
    "payout": PAYOUT_STATUSES,
    "dispute": DISPUTE_STATUSES,
}
# What a dispute's event must carry beyond every event's fields (docs/sandbox.md "Disputes").
_DISPUTE_FIELDS: Final = ("dispute_id", "charge_request_id", "type", "reason", "fee_minor", "evidence_due_by")


class InvalidSignature(InvalidRequest):
    code = "invalid_signature"


class InvalidWebhook(InvalidRequest):
    code = "invalid_webhook"


def verified_event(secret: str, signature: str | None, body: bytes) -> ProcessorEvent:
    """The signed body as an event, once its signature and timestamp are checked (before
    anything else) and its status is one its object can have: the one home of what a webhook
    must be, read by `service.receive` and by the data plane's (`receive.py`)."""
    now = clock_now_us()
    try:
        signing.verify(secret, signature, body, now_s=now // 1_000_000)
    except signing.SignatureError as error:
        refused = InvalidSignature(str(error), param=signing.SIGNATURE_HEADER)
        refused.code = error.code if error.code.startswith("signature_timestamp") else "invalid_signature"
        raise refused from error
    event = _event(body)
    allowed = _STATUSES[event.data.object]
    if event.data.status not in allowed:
        raise InvalidWebhook(f"a {event.data.object} event cannot say {event.data.status}", param="data.status")
    missing = [name for name in _DISPUTE_FIELDS if getattr(event.data, name) is None]
    if event.data.object == "dispute" and missing:
        raise InvalidWebhook(f"a dispute event names its {missing[0]}", param=f"data.{missing[0]}")
    return event


def _event(body: bytes) -> ProcessorEvent:
    """The signed body as an event. A key repeated in one object is refused
    (`DuplicateJsonKey`, 400 `duplicate_json_key`), as in every body paycore reads: the
    processor's signature covers bytes that two readers could read as two events."""
    try:
        document = strict_json.loads(body)
    except (ValueError, RecursionError) as error:
        raise InvalidWebhook("the event does not have the documented shape: the body is not JSON") from error
    try:
        return ProcessorEvent.model_validate(document)
    except ValidationError as error:
        raise InvalidWebhook(f"the event does not have the documented shape: {error.errors()[0]['msg']}") from error


def charge_result(data: EventData) -> ChargeResult:
    """The charge the event describes; an authorization's with its amounts and expiry (read by
    the data plane's `apply_payment.py` too)."""
    expires_at = data.authorization_expires_at
    return ChargeResult(
        request_id=data.request_id,
        status=cast(ChargeStatus, data.status),  # checked against CHARGE_STATUSES on receipt
        processor_charge_id=data.processor_charge_id or "",
        amount_minor=data.amount_minor,
        currency=data.currency,
        failure_code=data.failure_code,
        capture=data.capture or "automatic",
        amount_capturable_minor=data.amount_capturable_minor,
        amount_captured_minor=data.amount_captured_minor,
        amount_released_minor=data.amount_released_minor,
        authorization_expires_at_us=None if expires_at is None else parse_rfc3339(expires_at),
    )


def refund_result(data: EventData) -> RefundResult:
    """The refund the event describes (read by the data plane's `apply_refund.py` too)."""
    return RefundResult(
        request_id=data.request_id,
        status=cast(ResultStatus, data.status),  # checked against RESULT_STATUSES on receipt
        processor_refund_id=data.processor_refund_id or "",
        amount_minor=data.amount_minor,
        currency=data.currency,
        failure_code=data.failure_code,
    )


def payout_result(data: EventData) -> PayoutResult:
    """The payout the event describes, its rail given (read by the data plane too)."""
    assert data.rail is not None and data.status in PAYOUT_STATUSES, data
    return PayoutResult(
        request_id=data.request_id,
        status=data.status,
        bank_payout_id=data.bank_payout_id or "",
        amount_minor=data.amount_minor,
        currency=data.currency,
        rail=data.rail,
        batch_id=data.batch_id,
        fee_minor=data.fee_minor or 0,
        failure_code=data.failure_code,
        return_code=data.return_code,
        return_amount_minor=data.return_amount_minor,
        return_fee_minor=data.return_fee_minor or 0,
    )
