"""Authorizations in the sandbox (SPEC §6.1): a charge asked with `capture` manual is
authorized (`requires_capture`) and then closed once, by the first of:

- a capture of all or part of it (`captured`: `captured_minor` taken, the rest released);
- a cancel (`canceled`: all of it released);
- its expiry, `authorization_expires_at_us` (`expired`: all of it released). The background
  round expires what is due, and so does any read, capture or cancel that finds it due first:
  a capture after the expiry time is refused as expired even if the round has not run.

Captures and cancels are requests of their own, deduped on their request id like charges
(`sandbox_charge_actions`): a repeat answers the charge as it is now (closed, it no longer
changes), other parameters are refused `request_id_reused`, a refusal stores nothing. Each
closing queues one event (`charge.captured`, `charge.canceled`, `charge.expired`) in the
transaction that closed it, with the charge's webhook faults and the call's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy import Connection

from paycore.kit import clock
from paycore.processor.port import CancelRequest, CaptureRequest, ChargeResult, ProcessorRefused
from paycore_sandbox import authorization_repository, repository, webhooks
from paycore_sandbox.faults import NO_FAULTS, Decision
from paycore_sandbox.processing import (
    SEQUENCE_AUTHORIZATION_CLOSED,
    authorization_amounts,
    charge_event,
    charge_result,
    plan_dispute,
)

_CAPTURE_PARAMETERS: Final = ("kind", "merchant_id", "payment_reference", "amount_minor", "currency")
_CANCEL_PARAMETERS: Final = ("kind", "merchant_id", "payment_reference")


def is_due(row: Mapping[str, Any], now_us: int) -> bool:
    """An open authorization whose lifetime has ended."""
    return row["status"] == "requires_capture" and bool(row["authorization_expires_at_us"] <= now_us)


def expire(connection: Connection, row: Mapping[str, Any], now_us: int) -> bool:
    """Expire a due authorization and queue `charge.expired`; False if it was closed meanwhile."""
    assert is_due(row, now_us)
    if not authorization_repository.expire(connection, row["request_id"], now_us):
        return False
    values = {**row, "status": "expired", "released_minor": row["amount_minor"], "updated_at_us": now_us}
    _queue(connection, values, NO_FAULTS, now_us)
    return True


def capture(
    connection: Connection, request: CaptureRequest, faults: Decision, now_us: int
) -> ChargeResult | ProcessorRefused:
    """Capture (or replay). A refusal found after expiring the authorization is returned, not
    raised, so that the expiry commits; every other refusal is raised and stores nothing."""
    replayed = _replay(connection, request, "capture", _CAPTURE_PARAMETERS)
    if replayed is not None:
        return replayed
    charge = _authorization(connection, request.merchant_id, request.payment_reference)
    if charge["currency"] != request.currency:
        raise ProcessorRefused(
            "currency_mismatch", f"the charge is in {charge['currency']}, the capture in {request.currency}"
        )
    expired = _expire_if_due(connection, charge, "capture", now_us)
    if expired is not None:
        return expired
    # Claimed before the status checks: a concurrent call with this request id that committed
    # first is replayed, never refused for the state it left (a refusal below rolls this back).
    if not _insert_action(connection, request, "capture", charge, request.amount_minor, now_us):
        return _replayed_meanwhile(connection, request, _CAPTURE_PARAMETERS)
    _check_open(charge, "capture")
    _, _, capturable = authorization_amounts(charge)
    if request.amount_minor > capturable:
        raise ProcessorRefused(
            "amount_too_large",
            f"capturing {request.amount_minor} of {request.payment_reference}: at most {capturable} is capturable",
        )
    released_minor = charge["amount_minor"] - request.amount_minor
    assert request.amount_minor + released_minor == charge["amount_minor"], "captured + released = authorized"
    if not authorization_repository.capture(
        connection, charge["request_id"], request.amount_minor, released_minor, now_us
    ):
        raise _closed_meanwhile(request.payment_reference, "charge_not_capturable")
    values = {
        **charge,
        "status": "captured",
        "captured_minor": request.amount_minor,
        "released_minor": released_minor,
        "captured_at_us": now_us,
        "updated_at_us": now_us,
    }
    _queue(connection, values, faults, now_us)
    plan_dispute(connection, values, now_us)
    return charge_result(values)


def cancel(
    connection: Connection, request: CancelRequest, faults: Decision, now_us: int
) -> ChargeResult | ProcessorRefused:
    """Cancel (or replay); refusals as `capture`'s."""
    replayed = _replay(connection, request, "cancel", _CANCEL_PARAMETERS)
    if replayed is not None:
        return replayed
    charge = _authorization(connection, request.merchant_id, request.payment_reference)
    expired = _expire_if_due(connection, charge, "cancel", now_us)
    if expired is not None:
        return expired
    if not _insert_action(connection, request, "cancel", charge, charge["amount_minor"], now_us):
        return _replayed_meanwhile(connection, request, _CANCEL_PARAMETERS)
    _check_open(charge, "cancel")
    if not authorization_repository.cancel(connection, charge["request_id"], now_us):
        raise _closed_meanwhile(request.payment_reference, "charge_not_cancelable")
    values = {**charge, "status": "canceled", "released_minor": charge["amount_minor"], "updated_at_us": now_us}
    _queue(connection, values, faults, now_us)
    return charge_result(values)


def _replay(connection: Connection, request: Any, kind: str, names: tuple[str, ...]) -> ChargeResult | None:
    """The answer to a request id seen before (the charge as it is now), or None if it is new."""
    existing = authorization_repository.find_action(connection, request.request_id)
    if existing is None:
        return None
    asked = {"kind": kind, **{name: getattr(request, name) for name in names if name != "kind"}}
    differing = [name for name in names if existing[name] != asked[name]]
    if differing:
        raise ProcessorRefused(
            "request_id_reused",
            f"request id {request.request_id!r} was used with other parameters ({', '.join(differing)})",
        )
    charge = repository.find_charge(connection, existing["charge_request_id"])
    assert charge is not None and charge["status"] in ("captured", "canceled"), "an action closed its charge"
    return charge_result(charge)


def _replayed_meanwhile(connection: Connection, request: Any, names: tuple[str, ...]) -> ChargeResult:
    """The same request id was committed by a concurrent call: its answer."""
    kind = "capture" if isinstance(request, CaptureRequest) else "cancel"
    replayed = _replay(connection, request, kind, names)
    assert replayed is not None, "the insert conflicted with a committed row"
    return replayed


def _authorization(connection: Connection, merchant_id: str, payment_reference: str) -> dict[str, Any]:
    charge = repository.find_charge_by_processor_id(connection, payment_reference)
    # Another merchant's charge is not found, rather than refused, so as not to reveal it.
    if charge is None or charge["merchant_id"] != merchant_id:
        raise ProcessorRefused("charge_not_found", f"no charge {payment_reference!r} for this merchant")
    return charge


def _expire_if_due(connection: Connection, charge: dict[str, Any], action: str, now_us: int) -> ProcessorRefused | None:
    """The refusal of `action` on an authorization this call found due and expired (committed
    with the refusal), or None. An automatic charge is refused here, before anything is stored."""
    if charge["capture"] != "manual":
        code = "charge_not_capturable" if action == "capture" else "charge_not_cancelable"
        reference = charge["processor_charge_id"]
        raise ProcessorRefused(code, f"charge {reference} was charged at once (capture automatic): nothing to {action}")
    if is_due(charge, now_us) and expire(connection, charge, now_us):
        return _expired(charge["processor_charge_id"], charge)
    return None  # not due, or closed meanwhile by another call: the guarded update will say


def _check_open(charge: dict[str, Any], action: str) -> None:
    """Refuse `action` on an authorization that is no longer open."""
    reference = charge["processor_charge_id"]
    if charge["status"] == "expired":
        raise _expired(reference, charge)
    if charge["status"] != "requires_capture":
        code = "charge_not_capturable" if action == "capture" else "charge_not_cancelable"
        raise ProcessorRefused(code, f"charge {reference} is {charge['status']}: it cannot be {action}d now")


def _expired(reference: str, charge: Mapping[str, Any]) -> ProcessorRefused:
    expired_at = clock.to_rfc3339(charge["authorization_expires_at_us"])
    return ProcessorRefused("authorization_expired", f"the authorization {reference} expired at {expired_at}")


def _closed_meanwhile(reference: str, code: str) -> ProcessorRefused:
    return ProcessorRefused(code, f"the authorization {reference} was closed by another call meanwhile: read it")


def _insert_action(
    connection: Connection, request: Any, kind: str, charge: Mapping[str, Any], amount_minor: int, now_us: int
) -> bool:
    values = {
        "request_id": request.request_id,
        "kind": kind,
        "merchant_id": request.merchant_id,
        "charge_request_id": charge["request_id"],
        "payment_reference": request.payment_reference,
        "amount_minor": amount_minor,
        "currency": charge["currency"],
        "created_at_us": now_us,
    }
    return authorization_repository.insert_action(connection, values)


def _queue(connection: Connection, values: Mapping[str, Any], faults: Decision, now_us: int) -> None:
    """The closing event, duplicated or reordered by the charge's faults or this call's."""
    flags = {
        "webhook_duplicate": bool(values["webhook_duplicate"]) or faults.duplicate_webhook,
        "webhook_reorder": bool(values["webhook_reorder"]) or faults.reorder_webhooks,
    }
    webhooks.enqueue(connection, charge_event({**values, **flags}, SEQUENCE_AUTHORIZATION_CLOSED), now_us)
