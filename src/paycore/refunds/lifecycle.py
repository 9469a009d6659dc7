"""The only place a refund's status changes (SPEC §7.1, §8, §10): the refund's machine for the
one lifecycle (`paycore.lifecycle`), and what the processor's evidence proves.

Evidence comes from the worker that sent the refund, the resolver that asks about it, a
webhook and a settlement report; people approve and cancel (`service`). Each change is a
compare-and-set through the transition table, in one transaction with its ledger effect (the
pending transfer posted on success, voided on failure or cancel), the refund ceiling's release
(a failed or canceled refund gives its amount back to the payment) and the audit event.

- A result: `succeeded` or `failed` moves the refund there; `pending` changes nothing (the
  processor has it and will say later).
- A refusal (the processor says it did nothing with this request) fails the refund with the
  processor's code, except `request_id_reused`: the processor holds *something* under this
  request id, so that is no proof that nothing moved, and it is treated like no answer.
- No answer (timeout, dropped connection, 5xx) or "no record of this request id" proves
  nothing: a `processing` refund becomes `in_doubt`, anything else stays as it is.
- A result whose amount or currency differ from the refund's is never applied ("mismatch").
"""

from __future__ import annotations

from functools import partial
from typing import Any

from sqlalchemy import Connection

from paycore.ledger import service as ledger
from paycore.lifecycle.evidence import MANUAL_FAILURE_CODE, Applied, Decision, Evidence
from paycore.lifecycle.machine import Machine
from paycore.processor.port import RefundResult
from paycore.refunds import ceiling, states
from paycore.refunds.errors import RefundNotFound
from paycore.refunds.models import refunds
from paycore.refunds.schemas import summary_json
from paycore.refunds.types import Refund, refund_from_row, refund_row

# Refusal codes that do not prove the processor did nothing under this request id.
_UNPROVEN_REFUSALS = frozenset({"request_id_reused"})
DEFAULT_FAILURE_CODE = "refund_failed"


def target_of(current: str, evidence: Evidence[Any]) -> tuple[str | None, str | None]:
    """(target state, or None to stay; failure_code)."""
    if evidence.kind == "manual":
        return (states.SUCCEEDED, None) if evidence.outcome == "succeeded" else (states.FAILED, MANUAL_FAILURE_CODE)
    if evidence.kind == "result":
        assert evidence.result is not None
        if evidence.result.status == "succeeded":
            return states.SUCCEEDED, None
        if evidence.result.status == "failed":
            return states.FAILED, evidence.result.failure_code or DEFAULT_FAILURE_CODE
        return None, None  # pending: accepted, the final answer comes later
    if evidence.kind == "refused" and evidence.refusal_code not in _UNPROVEN_REFUSALS:
        return states.FAILED, evidence.refusal_code or "processor_refused"
    return (states.IN_DOUBT, None) if current == states.PROCESSING else (None, None)


def decide(current: str, evidence: Evidence[Any]) -> Decision:
    target, failure_code = target_of(current, evidence)
    if target is None:
        return Decision()
    result = evidence.result
    reference = result.processor_refund_id if isinstance(result, RefundResult) else None
    return _decision(target, failure_code, reference)


def _decision(target: str, failure_code: str | None, reference: str | None) -> Decision:
    values: dict[str, Any] = {}
    if reference:
        values["processor_reference"] = reference
    if target != states.FAILED:
        return Decision((target,), values)
    values["failure_code"] = failure_code or DEFAULT_FAILURE_CODE
    return Decision((target,), values, {"failure_code": values["failure_code"]})


def matches(refund: Refund, result: RefundResult) -> bool:
    return (result.amount_minor, result.currency) == (refund.amount_minor, refund.currency)


def _effect(connection: Connection, refund: Refund, to_state: str, now_us: int) -> None:
    # The payment row before the ledger's account rows, in the order create_refund locks them:
    # the other order deadlocks on PostgreSQL with a refund created meanwhile.
    if to_state in states.RELEASED:
        ceiling.release(connection, refund.tenant_id, refund.payment_id, refund.amount_minor)
    if to_state in states.TERMINAL and refund.transfer_id is not None:
        post = to_state == states.SUCCEEDED
        ledger.settle_pending(
            connection, refund.tenant_id, refund.transfer_id, post=post, now_us=now_us, owner_id=refund.id
        )


def _log_ids(refund: Refund) -> dict[str, str]:
    return {"payment_id": refund.payment_id}


MACHINE: Machine[Refund] = Machine(
    object_type="refund",
    table=refunds,
    states=states,
    from_row=refund_from_row,
    to_row=refund_row,
    not_found=partial(RefundNotFound, "no such refund", param="id"),
    effect=_effect,
    decide=decide,
    matches=matches,
    log_ids=_log_ids,
    snapshot=summary_json,
    references=("payment_id", "processor_reference", "idempotency_key"),
)


def move(
    connection: Connection,
    refund: Refund,
    to_state: str,
    *,
    cause: str,
    actor: str,
    now_us: int,
    failure_code: str | None = None,
    values: dict[str, Any] | None = None,
) -> Applied[Refund]:
    """A change nobody's evidence brings (approve, cancel, a replayed result, a refund that
    cannot be sent): the same compare-and-set, ledger effect and audit event."""
    decision = _decision(to_state, failure_code, None)
    return MACHINE.move(
        connection,
        refund,
        to_state,
        cause=cause,
        actor=actor,
        now_us=now_us,
        values={**decision.values, **(values or {})},
        data=decision.data,
    )
