"""Disputes in the sandbox (SPEC §6.2): the cardholder's bank pulls back a captured charge.

A dispute is opened by the background round `dispute_open_after_ms` after a `tok_disputed`
charge succeeds (reason `fraudulent`, a chargeback of all that was captured), or at once by the
admin call `POST /v1/sandbox/disputes` on any captured charge (an amount up to what was
captured, a reason, a type). At most one dispute per charge.

    chargeback: needs_response -> under_review -> won | lost      (evidence, then the decision)
                needs_response -> lost                             (accepted, or the window passed)
    inquiry:    warning_needs_response -> warning_closed           (accepted, or evidence that wins)
                warning_needs_response -> needs_response           (a chargeback: evidence that
                                                                    loses, or the window passed)

A chargeback withdraws its amount and `dispute_fee_minor` from the merchant when it opens (an
inquiry when it becomes one); a won one reinstates the amount (the fee is kept, as most
processors keep it). Evidence is decided `dispute_decision_after_ms` after it came, seeded:
text containing `losing_evidence` loses, else text containing `winning_evidence` wins, else
the first byte of SHA-256 of "{dispute_decision_seed}:{text}" decides (below 128 wins), so the
same text always gets the same answer. An evidence deadline (`evidence_due_by`) is
`dispute_evidence_window_ms` after the opening.

Evidence and accept calls are requests of their own, deduped on their request id like
captures: a repeat answers the dispute as it is now, other parameters are `request_id_reused`,
a refusal stores nothing. Every change queues one event (`dispute.created`, `dispute.updated`,
`dispute.closed`) whose `sequence` counts the dispute's events, with the dispute's webhook
faults (from the call that opened it) and the call's.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection

from paycore.kit import clock
from paycore.kit.ids import new_ulid

# The requests and the result are the port's (paycore's HttpTransport speaks them too); this
# module's readers keep importing them from here.
from paycore.processor.port import AcceptRequest as AcceptRequest
from paycore.processor.port import DisputeResult as DisputeResult
from paycore.processor.port import EvidenceRequest as EvidenceRequest
from paycore.processor.port import ProcessorRefused
from paycore_sandbox import dispute_repository, repository, webhooks
from paycore_sandbox.checks import check_text
from paycore_sandbox.faults import NO_FAULTS, Decision
from paycore_sandbox.limits import (
    DISPUTE_REASONS,
    DISPUTE_STEP_MS_MAX,
    DISPUTE_TYPES,
    EVIDENCE_TEXT_LENGTH_MAX,
    MERCHANT_ID_LENGTH_MAX,
    REQUEST_ID_LENGTH_MAX,
    SandboxSettings,
)

DISPUTE_ID_PREFIX: Final = "dp_sbx_"
WINNING_EVIDENCE: Final = "winning_evidence"
LOSING_EVIDENCE: Final = "losing_evidence"
TOKEN_DISPUTED_REASON: Final = "fraudulent"
_SEED_WINS_BELOW: Final = 128  # of a digest's first byte: half the texts win
_AMOUNT_MINOR_MAX: Final = 2**53 - 1


@dataclass(frozen=True)
class OpenDisputeRequest:
    payment_reference: str  # the charge's processor_charge_id
    reason: str = TOKEN_DISPUTED_REASON
    type: str = "chargeback"
    amount_minor: int | None = None  # None: all that was captured
    # This dispute's evidence window (a scenario's dispute lost by silence within seconds);
    # None: the sandbox's `dispute_evidence_window_ms`, seven days by default.
    evidence_window_ms: int | None = None


def result(row: Mapping[str, Any]) -> DisputeResult:
    closed_at_us = row["closed_at_us"]
    return DisputeResult(
        dispute_id=row["dispute_id"],
        charge_request_id=row["charge_request_id"],
        payment_reference=row["payment_reference"],
        merchant_id=row["merchant_id"],
        type=row["type"],
        status=row["status"],
        reason=row["reason"],
        amount_minor=row["amount_minor"],
        currency=row["currency"],
        fee_minor=row["fee_minor"],
        evidence_due_by=clock.to_rfc3339(row["evidence_due_by_us"]),
        evidence_submitted=row["evidence_submitted_at_us"] is not None,
        created_at=clock.to_rfc3339(row["created_at_us"]),
        closed_at=None if closed_at_us is None else clock.to_rfc3339(closed_at_us),
    )


def decision(text: str, seed: int) -> str:
    """How the network decides `text` (module docstring): `won` or `lost`, the same every time."""
    if LOSING_EVIDENCE in text:
        return "lost"
    if WINNING_EVIDENCE in text:
        return "won"
    digest = hashlib.sha256(f"{seed}:{text}".encode()).digest()
    return "won" if digest[0] < _SEED_WINS_BELOW else "lost"


# --- checks before any transaction: a refusal stores nothing ----------------------------------


def check_open(request: OpenDisputeRequest) -> None:
    check_text("payment_reference", request.payment_reference, REQUEST_ID_LENGTH_MAX)
    if request.type not in DISPUTE_TYPES:
        raise ProcessorRefused("invalid_request", f"type is one of {', '.join(DISPUTE_TYPES)}, not {request.type!r}")
    if request.reason not in DISPUTE_REASONS:
        raise ProcessorRefused("invalid_request", f"reason is one of {', '.join(DISPUTE_REASONS)}")
    amount = request.amount_minor
    if amount is not None and (type(amount) is not int or not 1 <= amount <= _AMOUNT_MINOR_MAX):
        raise ProcessorRefused("invalid_amount", "amount_minor is a positive integer of minor units")
    window = request.evidence_window_ms
    if window is not None and (type(window) is not int or not 1 <= window <= DISPUTE_STEP_MS_MAX):
        raise ProcessorRefused("invalid_request", f"evidence_window_ms is 1 to {DISPUTE_STEP_MS_MAX} milliseconds")


def check_action(request: EvidenceRequest | AcceptRequest) -> None:
    check_text("request_id", request.request_id, REQUEST_ID_LENGTH_MAX)
    check_text("merchant_id", request.merchant_id, MERCHANT_ID_LENGTH_MAX)
    check_text("dispute_id", request.dispute_id, REQUEST_ID_LENGTH_MAX)
    if isinstance(request, EvidenceRequest):
        text = request.text
        if not isinstance(text, str) or not 1 <= len(text) <= EVIDENCE_TEXT_LENGTH_MAX or "\x00" in text:
            raise ProcessorRefused("invalid_request", f"text is 1 to {EVIDENCE_TEXT_LENGTH_MAX} characters, no NUL")


# --- opening ----------------------------------------------------------------------------


def open_dispute(
    connection: Connection, request: OpenDisputeRequest, faults: Decision, settings: SandboxSettings, now_us: int
) -> DisputeResult:
    """The admin call: open a dispute on a captured charge now."""
    charge = repository.find_charge_by_processor_id(connection, request.payment_reference)
    if charge is None:
        raise ProcessorRefused("charge_not_found", f"no charge {request.payment_reference!r}")
    captured_minor = captured_of(charge)
    if captured_minor == 0:
        raise ProcessorRefused(
            "charge_not_disputable",
            f"charge {request.payment_reference} is {charge['status']}: only captured money can be disputed",
        )
    amount_minor = captured_minor if request.amount_minor is None else request.amount_minor
    if amount_minor > captured_minor:
        raise ProcessorRefused(
            "amount_too_large",
            f"disputing {amount_minor} of {request.payment_reference}: at most {captured_minor} was captured",
        )
    window_ms = request.evidence_window_ms
    values = _new(charge, amount_minor, request.reason, request.type, faults, settings, now_us, window_ms)
    if not dispute_repository.insert(connection, values):
        raise ProcessorRefused("charge_already_disputed", f"charge {request.payment_reference} has a dispute already")
    dispute_repository.unplan(connection, charge["request_id"])  # a planned one would find this one
    _queue(connection, values, "created", faults, now_us)
    return result(values)


def open_planned(
    connection: Connection, planned: Mapping[str, Any], faults: Decision, settings: SandboxSettings, now_us: int
) -> bool:
    """Open a tok_disputed charge's dispute whose time came; False if another round did, or the
    charge has one already (opened by the admin call)."""
    if not dispute_repository.unplan(connection, planned["charge_request_id"]):
        return False
    charge = repository.find_charge(connection, planned["charge_request_id"])
    assert charge is not None and captured_of(charge) > 0, "a charge is planned for a dispute once it succeeded"
    values = _new(charge, captured_of(charge), TOKEN_DISPUTED_REASON, "chargeback", faults, settings, now_us)
    if not dispute_repository.insert(connection, values):
        return False
    _queue(connection, values, "created", faults, now_us)
    return True


def captured_of(charge: Mapping[str, Any]) -> int:
    """What a charge took from the card: all of an automatic one that succeeded, the captured
    part of an authorization; 0 for anything else (pending, declined, open, released)."""
    if charge["status"] == "succeeded":
        amount: int = charge["amount_minor"]
        return amount
    if charge["status"] == "captured":
        captured: int = charge["captured_minor"]
        return captured
    return 0


def _new(
    charge: Mapping[str, Any],
    amount_minor: int,
    reason: str,
    dispute_type: str,
    faults: Decision,
    settings: SandboxSettings,
    now_us: int,
    window_ms: int | None = None,
) -> dict[str, Any]:
    """A new dispute's row; its evidence window `window_ms`, or the sandbox's."""
    chargeback = dispute_type == "chargeback"
    due_us = now_us + (settings.dispute_evidence_window_ms if window_ms is None else window_ms) * 1_000
    assert 0 < amount_minor <= captured_of(charge)
    return {
        "dispute_id": DISPUTE_ID_PREFIX + new_ulid(),
        "charge_request_id": charge["request_id"],
        "payment_reference": charge["processor_charge_id"],
        "merchant_id": charge["merchant_id"],
        "type": dispute_type,
        "status": "needs_response" if chargeback else "warning_needs_response",
        "reason": reason,
        "amount_minor": amount_minor,
        "currency": charge["currency"],
        "fee_minor": settings.dispute_fee_minor if chargeback else 0,
        "evidence_due_by_us": due_us,
        "evidence_submitted_at_us": None,
        "planned_decision": None,
        "next_step_at_us": due_us,
        "sequence": 1,
        "webhook_duplicate": faults.duplicate_webhook,
        "webhook_reorder": faults.reorder_webhooks,
        "created_at_us": now_us,
        "withdrawn_at_us": now_us if chargeback else None,
        "reinstated_at_us": None,
        "closed_at_us": None,
        "updated_at_us": now_us,
    }


def _queue(connection: Connection, values: Mapping[str, Any], event: str, faults: Decision, now_us: int) -> None:
    """The dispute's event, duplicated or reordered by its faults or this call's, or dropped."""
    webhooks.enqueue(
        connection,
        webhooks.EventSpec(
            object_type="dispute",
            object_request_id=values["dispute_id"],
            sequence=values["sequence"],
            status=values["status"],
            data={"object": "dispute", **dataclasses.asdict(result(values))},
            duplicate=bool(values["webhook_duplicate"]) or faults.duplicate_webhook,
            reorder=bool(values["webhook_reorder"]) or faults.reorder_webhooks,
            final=event == "closed",
            event_type=f"dispute.{event}",
            dropped=faults.drop_webhook,
        ),
        now_us,
    )


def change(
    connection: Connection,
    row: Mapping[str, Any],
    values: Mapping[str, Any],
    event: str,
    faults: Decision,
    now_us: int,
) -> dict[str, Any] | None:
    """Apply `values` to the dispute read as `row` and queue its event; None if another call
    changed it first."""
    changed = {**values, "sequence": row["sequence"] + 1, "updated_at_us": now_us}
    if not dispute_repository.change(connection, row, changed):
        return None
    after = {**row, **changed}
    _queue(connection, after, event, faults, now_us)
    return after


def closing(status: str, now_us: int) -> dict[str, Any]:
    assert status in ("won", "lost", "warning_closed")
    return {
        "status": status,
        "next_step_at_us": None,
        "closed_at_us": now_us,
        "reinstated_at_us": now_us if status == "won" else None,
    }


def escalation(settings: SandboxSettings, now_us: int) -> dict[str, Any]:
    """An inquiry becomes a chargeback: the money and the fee go now, a new window opens."""
    due_us = now_us + settings.dispute_evidence_window_ms * 1_000
    return {
        "type": "chargeback",
        "status": "needs_response",
        "fee_minor": settings.dispute_fee_minor,
        "withdrawn_at_us": now_us,
        "evidence_due_by_us": due_us,
        "evidence_submitted_at_us": None,
        "planned_decision": None,
        "next_step_at_us": due_us,
    }


def step(connection: Connection, row: Mapping[str, Any], settings: SandboxSettings, now_us: int) -> bool:
    """What is due for an open dispute at `now_us`: a decision on its evidence, or its deadline
    passing without an answer. False if another call changed it first."""
    assert row["next_step_at_us"] is not None and row["next_step_at_us"] <= now_us
    planned = row["planned_decision"]
    if row["type"] == "inquiry":
        values = closing("warning_closed", now_us) if planned == "won" else escalation(settings, now_us)
        event = "closed" if planned == "won" else "updated"
    else:
        values, event = closing(planned or "lost", now_us), "closed"
    return change(connection, row, values, event, NO_FAULTS, now_us) is not None


def run_due(connection: Connection, settings: SandboxSettings, now_us: int, decide_open: Callable[[], Decision]) -> int:
    """Decide and close what is due, then open the planned disputes whose time came (each asks
    the fault plan as a `dispute_open` call would: its webhook faults apply to the dispute)."""
    limit = settings.settle_batch_max
    changed = sum(step(connection, row, settings, now_us) for row in dispute_repository.due(connection, now_us, limit))
    succeeded_before_us = now_us - settings.dispute_open_after_ms * 1_000
    for planned in dispute_repository.planned_due(connection, succeeded_before_us, limit):
        changed += open_planned(connection, planned, decide_open(), settings, now_us)
    return changed
