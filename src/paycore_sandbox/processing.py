"""What the sandbox processor does with a charge or a refund, inside one transaction.

Outcomes come from test tokens, like a public processor's test cards:

| token                    | charge                                   | refunds of it           |
|--------------------------|------------------------------------------|-------------------------|
| `tok_ok`                 | succeeded                                | succeeded               |
| `tok_declined`           | failed `card_declined`                   | (not refundable)        |
| `tok_insufficient_funds` | failed `insufficient_funds`              | (not refundable)        |
| `tok_timeout`            | succeeded, but every answer to it is lost | succeeded               |
| `tok_pending`            | pending, then succeeded (settle_late_ms) | succeeded               |
| `tok_refund_declined`    | succeeded                                | failed `refund_declined` |
| `tok_expires_quickly`    | succeeded; authorized for 2 s (manual)   | succeeded               |
| `tok_disputed`           | succeeded, then disputed (disputes.py)   | succeeded               |

A charge with `capture` manual is an authorization: where the table says succeeded it is
`requires_capture` instead, until captured, canceled or expired (authorizations.py).

A request id is the dedupe key: the primary key of its table. A repeat with the same
parameters gets the stored result (nothing moves twice); with other parameters it is refused
(`request_id_reused`). A refusal stores nothing. Refunds reserve their amount on the charge
(`refunded_minor`, succeeded and pending refunds) with one guarded UPDATE, and the database
refuses a total above the charge's amount as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from sqlalchemy import Connection, RowMapping

from paycore.kit import clock
from paycore.kit.ids import new_ulid
from paycore.processor.port import ChargeRequest, ChargeResult, ProcessorRefused, RefundRequest, RefundResult
from paycore_sandbox import dispute_repository, report_faults, repository, webhooks
from paycore_sandbox.faults import Decision
from paycore_sandbox.limits import AUTHORIZATION_LIFETIME_MS, QUICK_AUTHORIZATION_LIFETIME_MS

FinalStatus = Literal["succeeded", "failed", "requires_capture"]
CHARGE_ID_PREFIX: Final = "ch_"
REFUND_ID_PREFIX: Final = "re_"
SEQUENCE_FIRST: Final = 1
# An authorization's closing event (captured, canceled, expired) comes after its first and,
# if it was pending first, its second: 3 whichever it was, so it is always the newest.
SEQUENCE_AUTHORIZATION_CLOSED: Final = 3
# The statuses after which nothing more happens to a charge (its last event: see webhooks.py).
CLOSED_STATUSES: Final = frozenset({"succeeded", "failed", "captured", "canceled", "expired"})


@dataclass(frozen=True)
class TokenBehaviour:
    final_status: FinalStatus
    failure_code: str | None = None
    settles_late: bool = False  # answers pending, final status settle_late_ms later
    answer_lost: bool = False  # the charge is taken, the answer never reaches the caller
    refund_failure_code: str | None = None  # refunds of the charge fail with this code
    authorization_lifetime_ms: int = AUTHORIZATION_LIFETIME_MS  # manual capture: until it expires
    disputed: bool = False  # a chargeback opens dispute_open_after_ms after it succeeds (or is captured)


TOKENS: Final[dict[str, TokenBehaviour]] = {
    "tok_ok": TokenBehaviour("succeeded"),
    "tok_declined": TokenBehaviour("failed", "card_declined"),
    "tok_insufficient_funds": TokenBehaviour("failed", "insufficient_funds"),
    "tok_timeout": TokenBehaviour("succeeded", answer_lost=True),
    "tok_pending": TokenBehaviour("succeeded", settles_late=True),
    "tok_refund_declined": TokenBehaviour("succeeded", refund_failure_code="refund_declined"),
    "tok_expires_quickly": TokenBehaviour("succeeded", authorization_lifetime_ms=QUICK_AUTHORIZATION_LIFETIME_MS),
    "tok_disputed": TokenBehaviour("succeeded", disputed=True),
}

_CHARGE_PARAMETERS: Final = ("merchant_id", "amount_minor", "currency", "token", "description", "capture")
_REFUND_PARAMETERS: Final = ("merchant_id", "payment_reference", "amount_minor", "currency")


def create_charge(connection: Connection, request: ChargeRequest, faults: Decision, now_us: int) -> ChargeResult:
    assert request.token in TOKENS, "the token is checked before the transaction"
    behaviour = TOKENS[request.token]
    late = behaviour.settles_late or faults.settle_late
    manual = request.capture == "manual"
    final_status: FinalStatus = behaviour.final_status
    if manual and final_status == "succeeded":
        final_status = "requires_capture"  # authorized, not taken
    values = {
        "request_id": request.request_id,
        "processor_charge_id": CHARGE_ID_PREFIX + new_ulid(),
        "merchant_id": request.merchant_id,
        "amount_minor": request.amount_minor,
        "currency": request.currency,
        "token": request.token,
        "description": request.description,
        **_status_values(final_status, behaviour.failure_code, late, faults, now_us),
        "refunded_minor": 0,
        "webhook_duplicate": faults.duplicate_webhook,
        "webhook_reorder": faults.reorder_webhooks,
        "created_at_us": now_us,
        "updated_at_us": now_us,
        "capture": request.capture,
        "captured_minor": 0,
        "released_minor": 0,
        "authorization_expires_at_us": now_us + behaviour.authorization_lifetime_ms * 1_000 if manual else None,
        "captured_at_us": None,
    }
    if not repository.insert_charge(connection, values):
        existing = repository.find_charge(connection, request.request_id)
        assert existing is not None, "the insert conflicted with a committed row"
        _refuse_other_parameters(existing, request, _CHARGE_PARAMETERS)
        return charge_result(existing)
    webhooks.enqueue(connection, charge_event(values, SEQUENCE_FIRST), now_us)
    plan_dispute(connection, values, now_us)
    unknown_processor_id = CHARGE_ID_PREFIX + new_ulid() if faults.report_unknown_charge else None
    report_faults.record(connection, "charge", request.request_id, faults, unknown_processor_id)
    return charge_result(values)


def create_refund(connection: Connection, request: RefundRequest, faults: Decision, now_us: int) -> RefundResult:
    existing = repository.find_refund(connection, request.request_id)
    if existing is not None:
        _refuse_other_parameters(existing, request, _REFUND_PARAMETERS)
        return refund_result(existing)
    charge = _refundable_charge(connection, request)
    failure_code = TOKENS[charge["token"]].refund_failure_code
    final_status: FinalStatus = "failed" if failure_code is not None else "succeeded"
    values = {
        "request_id": request.request_id,
        "processor_refund_id": REFUND_ID_PREFIX + new_ulid(),
        "merchant_id": request.merchant_id,
        "charge_request_id": charge["request_id"],
        "payment_reference": request.payment_reference,
        "amount_minor": request.amount_minor,
        "currency": request.currency,
        **_status_values(final_status, failure_code, faults.settle_late, faults, now_us),
        "webhook_duplicate": faults.duplicate_webhook,
        "webhook_reorder": faults.reorder_webhooks,
        "created_at_us": now_us,
        "updated_at_us": now_us,
    }
    if not repository.insert_refund(connection, values):  # the same id, committed meanwhile
        existing = repository.find_refund(connection, request.request_id)
        assert existing is not None, "the insert conflicted with a committed row"
        _refuse_other_parameters(existing, request, _REFUND_PARAMETERS)
        return refund_result(existing)
    if values["status"] != "failed" and not repository.reserve_refund(
        connection, charge["request_id"], request.amount_minor, now_us
    ):
        raise ProcessorRefused(
            "over_refund",
            f"refunding {request.amount_minor} would take the refunds of {request.payment_reference} past "
            f"its amount of {charge['amount_minor']} (already refunded or pending: {charge['refunded_minor']})",
        )
    webhooks.enqueue(connection, _refund_event(values, SEQUENCE_FIRST), now_us)
    report_faults.record(connection, "refund", request.request_id, faults)
    return refund_result(values)


def settle(connection: Connection, object_type: str, row: RowMapping, now_us: int) -> bool:
    """Give a pending charge or refund its final status and queue its event; False if
    another settler did it first."""
    assert row["status"] == "pending"
    if not repository.finish(connection, object_type, row["request_id"], now_us):
        return False
    values = {**row, "status": row["final_status"], "failure_code": row["final_failure_code"]}
    if object_type == "refund" and row["final_status"] == "failed":
        repository.release_refund(connection, row["charge_request_id"], row["amount_minor"], now_us)
    event = charge_event if object_type == "charge" else _refund_event
    webhooks.enqueue(connection, event(values, SEQUENCE_FIRST + 1), now_us)
    if object_type == "charge":
        plan_dispute(connection, values, now_us)
    return True


def plan_dispute(connection: Connection, charge: Mapping[str, Any], now_us: int) -> None:
    """A tok_disputed charge that has just taken money is disputed later (disputes.run_due)."""
    if TOKENS[charge["token"]].disputed and charge["status"] in ("succeeded", "captured"):
        dispute_repository.plan(connection, charge["request_id"], now_us)


def charge_result(row: Any) -> ChargeResult:
    if row["capture"] == "automatic":
        return ChargeResult(
            request_id=row["request_id"],
            status=row["status"],
            processor_charge_id=row["processor_charge_id"],
            amount_minor=row["amount_minor"],
            currency=row["currency"],
            failure_code=row["failure_code"],
        )
    captured, released, capturable = authorization_amounts(row)
    return ChargeResult(
        request_id=row["request_id"],
        status=row["status"],
        processor_charge_id=row["processor_charge_id"],
        amount_minor=row["amount_minor"],
        currency=row["currency"],
        failure_code=row["failure_code"],
        capture="manual",
        amount_capturable_minor=capturable,
        amount_captured_minor=captured,
        amount_released_minor=released,
        authorization_expires_at_us=row["authorization_expires_at_us"],
    )


def authorization_amounts(row: Any) -> tuple[int, int, int]:
    """(captured, released, capturable) of an authorization: what is not captured or released
    is capturable while it is `requires_capture`; a pending or declined one holds nothing."""
    captured, released = row["captured_minor"], row["released_minor"]
    capturable = row["amount_minor"] - captured - released if row["status"] == "requires_capture" else 0
    assert captured >= 0 and released >= 0 and capturable >= 0
    assert row["status"] not in ("captured", "canceled", "expired") or captured + released == row["amount_minor"]
    return captured, released, capturable


def refund_result(row: Any) -> RefundResult:
    return RefundResult(
        request_id=row["request_id"],
        status=row["status"],
        processor_refund_id=row["processor_refund_id"],
        amount_minor=row["amount_minor"],
        currency=row["currency"],
        failure_code=row["failure_code"],
    )


def _status_values(
    final_status: FinalStatus, failure_code: str | None, late: bool, faults: Decision, now_us: int
) -> dict[str, Any]:
    assert (final_status == "failed") == (failure_code is not None)
    return {
        "status": "pending" if late else final_status,
        "failure_code": None if late else failure_code,
        "final_status": final_status,
        "final_failure_code": failure_code,
        "settle_at_us": now_us + faults.settle_late_ms * 1_000 if late else None,
    }


def _refundable_charge(connection: Connection, request: RefundRequest) -> dict[str, Any]:
    charge = repository.find_charge_by_processor_id(connection, request.payment_reference)
    # Another merchant's charge is not found, rather than refused, so as not to reveal it.
    if charge is None or charge["merchant_id"] != request.merchant_id:
        raise ProcessorRefused("charge_not_found", f"no charge {request.payment_reference!r} for this merchant")
    if charge["currency"] != request.currency:
        raise ProcessorRefused(
            "currency_mismatch", f"the charge is in {charge['currency']}, the refund in {request.currency}"
        )
    if charge["status"] not in ("succeeded", "captured"):
        raise ProcessorRefused(
            "charge_not_refundable",
            f"charge {request.payment_reference} is {charge['status']}, not succeeded or captured",
        )
    return charge


def _refuse_other_parameters(existing: Mapping[str, Any], request: object, names: tuple[str, ...]) -> None:
    differing = [name for name in names if existing[name] != getattr(request, name)]
    if differing:
        raise ProcessorRefused(
            "request_id_reused",
            f"request id {existing['request_id']!r} was used with other parameters ({', '.join(differing)})",
        )


def charge_event(values: Any, sequence: int) -> webhooks.EventSpec:
    """The event of a charge's status; an authorization's carries its amounts and expiry too
    (an automatic charge's carries exactly what it always did)."""
    data: dict[str, Any] = {
        "object": "charge",
        "request_id": values["request_id"],
        "merchant_id": values["merchant_id"],
        "processor_charge_id": values["processor_charge_id"],
        "status": values["status"],
        "amount_minor": values["amount_minor"],
        "currency": values["currency"],
        "failure_code": values["failure_code"],
    }
    if values["capture"] == "manual":
        captured, released, capturable = authorization_amounts(values)
        data["capture"] = "manual"
        data["amount_capturable_minor"] = capturable
        data["amount_captured_minor"] = captured
        data["amount_released_minor"] = released
        data["authorization_expires_at"] = clock.to_rfc3339(values["authorization_expires_at_us"])
    return _event("charge", values, sequence, data)


def _refund_event(values: Any, sequence: int) -> webhooks.EventSpec:
    data = {
        "object": "refund",
        "request_id": values["request_id"],
        "merchant_id": values["merchant_id"],
        "processor_refund_id": values["processor_refund_id"],
        "payment_reference": values["payment_reference"],
        "status": values["status"],
        "amount_minor": values["amount_minor"],
        "currency": values["currency"],
        "failure_code": values["failure_code"],
    }
    return _event("refund", values, sequence, data)


def _event(object_type: str, values: Any, sequence: int, data: dict[str, Any]) -> webhooks.EventSpec:
    return webhooks.EventSpec(
        object_type=object_type,
        object_request_id=values["request_id"],
        sequence=sequence,
        status=values["status"],
        data=data,
        duplicate=bool(values["webhook_duplicate"]),
        reorder=bool(values["webhook_reorder"]),
        final=values["status"] in CLOSED_STATUSES,
    )
