"""The sandbox's bank rail (SPEC §9): what happens to a payout, inside one transaction each.

A payout is `accepted` into the open batch of its rail and currency (one is opened when
there is none). A batch closes `bank_batch_window_ms` after it opened, or as soon as it holds
`bank_batch_max` payouts (or another would take its total past what one bank file carries).
From the close, on a compressed clock:

    close + bank_reject_after_ms   planned rejections          accepted -> rejected  (seq 2)
    close + bank_settle_after_ms   the others settle           accepted -> settled   (seq 2)
    settled + bank_return_after_ms planned returns             settled  -> returned  (seq 3)
    (bank_late_return_after_ms for the late codes: R10, FOCR)

The plan is chosen by the test account when the payout is accepted (`bank_accounts`) and
stored with it, so each step only carries it out. A step is a compare-and-set on the
payout's status and queues its webhook in the same transaction. A time-based close is
dated at the window's end, whenever the closer runs, so a batch's contents and its steps'
due times do not depend on how often the background loop wakes up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy import Connection, RowMapping

from paycore.db.engine import DatabaseBusy
from paycore.kit.ids import new_ulid
from paycore.processor.port import PayoutRequest, PayoutResult, ProcessorRefused
from paycore_sandbox import bank_repository as repository
from paycore_sandbox import report_faults, webhooks
from paycore_sandbox.bank_accounts import plan_for
from paycore_sandbox.faults import Decision
from paycore_sandbox.limits import ACH_BATCH_TOTAL_MINOR_MAX, SEPA_BATCH_TOTAL_MINOR_MAX, SandboxSettings

PAYOUT_ID_PREFIX: Final = "bpo_"
BATCH_ID_PREFIX: Final = "bb_"
SEQUENCE_ACCEPTED: Final = 1  # no webhook: the answer to the call says it
SEQUENCE_ANSWERED: Final = 2  # rejected or settled
SEQUENCE_RETURNED: Final = 3
BATCH_TOTAL_MINOR_MAX: Final[dict[str, int]] = {"ach": ACH_BATCH_TOTAL_MINOR_MAX, "sepa": SEPA_BATCH_TOTAL_MINOR_MAX}
PARAMETERS: Final = (
    "merchant_id",
    "amount_minor",
    "currency",
    "rail",
    "beneficiary_name",
    "iban",
    "bic",
    "routing_number",
    "account_number",
)
_OPEN_BATCH_ATTEMPTS_MAX: Final = 4  # a stale batch closed, a new one opened, a race lost, read


class Replayed(Exception):
    """A concurrent request with the same id was committed first: the caller rolls back and
    answers `replay(row, request)`."""

    def __init__(self, row: Mapping[str, Any]) -> None:
        super().__init__(row["request_id"])
        self.row = row


def replay(existing: Mapping[str, Any], request: PayoutRequest) -> PayoutResult:
    """The stored payout's result, if the request is the same; else request_id_reused."""
    _refuse_other_parameters(existing, request)
    return payout_result(existing)


def create_payout(
    connection: Connection, request: PayoutRequest, faults: Decision, settings: SandboxSettings, now_us: int
) -> PayoutResult:
    """Accept (or replay) a payout; the request has passed `bank_accounts.check_payout`. The
    usual case is three statements: the dedupe's read, joining the open batch, the insert."""
    existing = repository.find_payout(connection, request.request_id)
    if existing is not None:
        return replay(existing, request)
    total_max = BATCH_TOTAL_MINOR_MAX[request.rail]
    joined = repository.join_open_batch(
        connection, request.rail, request.currency, request.amount_minor, now_us, settings.bank_batch_max, total_max
    )
    if joined is None:  # no open batch, or none with room: close it, open another
        batch = _batch_to_join(connection, request, settings, now_us)
        repository.join_batch(connection, batch["batch_id"], request.amount_minor)
        joined = (batch["batch_id"], batch["count"] + 1)
    batch_id, count = joined
    values = _accepted_values(request, batch_id, faults, settings, now_us)
    if not repository.insert_payout(connection, values):  # the same id, committed meanwhile
        existing = repository.find_payout(connection, request.request_id)
        assert existing is not None, "the insert conflicted with a committed row"
        raise Replayed(existing)  # undo joining the batch (and any this call opened)
    report_faults.record(connection, "payout", request.request_id, faults)
    if count >= settings.bank_batch_max:
        _close(connection, batch_id, now_us, settings)
    return payout_result(values)


def close_due_batches(connection: Connection, settings: SandboxSettings, now_us: int) -> int:
    """Close the batches whose window has ended (at most bank_steps_max); return how many."""
    closed = 0
    for batch in repository.batches_to_close(connection, now_us, settings.bank_steps_max):
        closed += _close(connection, batch["batch_id"], batch["closes_at_us"], settings)
    return closed


def run_due_steps(connection: Connection, settings: SandboxSettings, now_us: int) -> int:
    """Reject, settle or return the payouts whose next step is due (at most bank_steps_max)."""
    moved = 0
    for row in repository.due_steps(connection, now_us, settings.bank_steps_max):
        moved += _step(connection, row, settings, now_us)
    return moved


def payout_result(row: Any) -> PayoutResult:
    return PayoutResult(
        request_id=row["request_id"],
        status=row["status"],
        bank_payout_id=row["bank_payout_id"],
        amount_minor=row["amount_minor"],
        currency=row["currency"],
        rail=row["rail"],
        batch_id=row["batch_id"],
        fee_minor=row["fee_minor"],
        failure_code=row["failure_code"],
        return_code=row["return_code"],
        return_amount_minor=row["return_amount_minor"],
        return_fee_minor=row["return_fee_minor"],
        settled_at_us=row["settled_at_us"],
        returned_at_us=row["returned_at_us"],
    )


# --- batches -------------------------------------------------------------------------------


def _batch_to_join(
    connection: Connection, request: PayoutRequest, settings: SandboxSettings, now_us: int
) -> RowMapping:
    """The open batch this payout fits in, locked; a batch it does not fit in is closed
    (at its window's end if that has passed, else now) and a new one opened."""
    for _ in range(_OPEN_BATCH_ATTEMPTS_MAX):
        batch = repository.open_batch(connection, request.rail, request.currency)
        if batch is None:
            repository.insert_batch(connection, _new_batch(request, settings, now_us))
            continue  # read it back, locked (or the one a concurrent payout opened first)
        if _has_room(batch, request.amount_minor, settings, now_us):
            return batch
        _close(connection, batch["batch_id"], min(batch["closes_at_us"], now_us), settings)
    raise DatabaseBusy(f"no open {request.rail} batch could be had in {_OPEN_BATCH_ATTEMPTS_MAX} attempts")


def _has_room(batch: RowMapping, amount_minor: int, settings: SandboxSettings, now_us: int) -> bool:
    total_minor_max = BATCH_TOTAL_MINOR_MAX[batch["rail"]]
    open_now: bool = now_us < batch["closes_at_us"]
    fits: bool = batch["count"] < settings.bank_batch_max and batch["total_minor"] + amount_minor <= total_minor_max
    return open_now and fits


def _new_batch(request: PayoutRequest, settings: SandboxSettings, now_us: int) -> dict[str, Any]:
    return {
        "batch_id": BATCH_ID_PREFIX + new_ulid(),
        "rail": request.rail,
        "currency": request.currency,
        "count": 0,
        "total_minor": 0,
        "opened_at_us": now_us,
        "closes_at_us": now_us + settings.bank_batch_window_ms * 1_000,
        "closed_at_us": None,
    }


def _close(connection: Connection, batch_id: str, closed_at_us: int, settings: SandboxSettings) -> bool:
    if not repository.close_batch(connection, batch_id, closed_at_us):
        return False
    reject_after_us = settings.bank_reject_after_ms * 1_000
    settle_after_us = settings.bank_settle_after_ms * 1_000
    repository.schedule_batch(connection, batch_id, closed_at_us, reject_after_us, settle_after_us)
    return True


# --- payouts -------------------------------------------------------------------------------


def _accepted_values(
    request: PayoutRequest, batch_id: str, faults: Decision, settings: SandboxSettings, now_us: int
) -> dict[str, Any]:
    plan = plan_for(request)
    return {
        "request_id": request.request_id,
        "bank_payout_id": PAYOUT_ID_PREFIX + new_ulid(),
        **{name: getattr(request, name) for name in PARAMETERS},
        "batch_id": batch_id,
        "status": "accepted",
        "planned_outcome": plan.outcome,
        "planned_code": plan.code,
        "planned_return_late": plan.late,
        "planned_return_charges_minor": settings.sepa_return_charges_minor if plan.deducts_charges else 0,
        "settle_late_ms": faults.settle_late_ms if faults.settle_late else 0,
        "fee_minor": 0,
        "failure_code": None,
        "return_code": None,
        "return_amount_minor": None,
        "return_fee_minor": 0,
        "webhook_duplicate": faults.duplicate_webhook,
        "webhook_reorder": faults.reorder_webhooks,
        "accepted_at_us": now_us,
        "rejected_at_us": None,
        "settled_at_us": None,
        "returned_at_us": None,
        "next_step_at_us": None,  # set when the batch closes
        "updated_at_us": now_us,
    }


def _step(connection: Connection, row: RowMapping, settings: SandboxSettings, now_us: int) -> bool:
    if row["status"] == "accepted" and row["planned_outcome"] == "rejected":
        values, sequence = _rejection(row, now_us), SEQUENCE_ANSWERED
    elif row["status"] == "accepted":
        values, sequence = _settlement(row, settings, now_us), SEQUENCE_ANSWERED
    else:
        assert row["status"] == "settled" and row["planned_outcome"] == "returned", "nothing else is ever due"
        values, sequence = _return(row, settings, now_us), SEQUENCE_RETURNED
    if not repository.advance(connection, row["request_id"], row["status"], {**values, "updated_at_us": now_us}):
        return False
    webhooks.enqueue(connection, _event({**row, **values}, sequence), now_us)
    return True


def _rejection(row: RowMapping, now_us: int) -> dict[str, Any]:
    return {
        "status": "rejected",
        "failure_code": row["planned_code"],
        "rejected_at_us": now_us,
        "next_step_at_us": None,
    }


def _settlement(row: RowMapping, settings: SandboxSettings, now_us: int) -> dict[str, Any]:
    next_step_at_us = None
    if row["planned_outcome"] == "returned":
        after_ms = settings.bank_late_return_after_ms if row["planned_return_late"] else settings.bank_return_after_ms
        next_step_at_us = now_us + after_ms * 1_000
    fee_minor = settings.ach_fee_minor if row["rail"] == "ach" else settings.sepa_fee_minor
    return {"status": "settled", "fee_minor": fee_minor, "settled_at_us": now_us, "next_step_at_us": next_step_at_us}


def _return(row: RowMapping, settings: SandboxSettings, now_us: int) -> dict[str, Any]:
    amount_minor, charges_minor = row["amount_minor"], row["planned_return_charges_minor"]
    # The returning bank may keep its charges (SEPA allows it), never the whole payout.
    return_amount_minor = amount_minor - charges_minor if amount_minor > charges_minor else amount_minor
    return_fee_minor = settings.ach_return_fee_minor if row["rail"] == "ach" else settings.sepa_return_fee_minor
    assert 0 < return_amount_minor <= amount_minor
    return {
        "status": "returned",
        "return_code": row["planned_code"],
        "return_amount_minor": return_amount_minor,
        "return_fee_minor": return_fee_minor,
        "returned_at_us": now_us,
        "next_step_at_us": None,
    }


def _refuse_other_parameters(existing: Mapping[str, Any], request: PayoutRequest) -> None:
    differing = [name for name in PARAMETERS if existing[name] != getattr(request, name)]
    if differing:
        raise ProcessorRefused(
            "request_id_reused",
            f"request id {existing['request_id']!r} was used with other parameters ({', '.join(differing)})",
        )


def _event(values: Any, sequence: int) -> webhooks.EventSpec:
    data = {
        "object": "payout",
        "request_id": values["request_id"],
        "merchant_id": values["merchant_id"],
        "status": values["status"],
        "amount_minor": values["amount_minor"],
        "currency": values["currency"],
        "rail": values["rail"],
        "bank_payout_id": values["bank_payout_id"],
        "batch_id": values["batch_id"],
        "fee_minor": values["fee_minor"],
        "failure_code": values["failure_code"],
        "return_code": values["return_code"],
        "return_amount_minor": values["return_amount_minor"],
        "return_fee_minor": values["return_fee_minor"],
    }
    # A settlement that a return will follow is not the payout's last word: reorder_webhooks
    # holds it back until the return is queued.
    final = not (values["status"] == "settled" and values["planned_outcome"] == "returned")
    return webhooks.EventSpec(
        object_type="payout",
        object_request_id=values["request_id"],
        sequence=sequence,
        status=values["status"],
        data=data,
        duplicate=bool(values["webhook_duplicate"]),
        reorder=bool(values["webhook_reorder"]),
        final=final,
    )
