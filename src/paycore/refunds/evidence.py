"""Apply what the processor said about a refund (SPEC §8, §10): evidence, never a guess.

Three actors bring evidence: the worker that sent the refund, the resolver that asks about
it, and a webhook. Each decides the target state from the evidence alone and moves the
refund through `refunds.service.apply` (transition table, compare-and-set, ledger, rule-zero
reservation, audit), so whoever comes second changes nothing.

- A result: `succeeded` or `failed` moves the refund there; `pending` changes nothing (the
  processor has it and will say later).
- A refusal (the processor says it did nothing with this request) fails the refund with the
  processor's code, except `request_id_reused`: the processor holds *something* under this
  request id, so that is no proof that nothing moved, and it is treated like no answer.
- No answer (timeout, dropped connection, 5xx) or "no record of this request id" proves
  nothing: a `processing` refund becomes `in_doubt`, anything else stays as it is.
- A result whose amount or currency differ from the refund's is never applied ("mismatch"):
  a person must look.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection

from paycore.processor.port import RefundResult
from paycore.refunds import service, states
from paycore.refunds.types import Refund

EvidenceKind = Literal["result", "refused", "unreachable", "not_found"]
# Refusal codes that do not prove the processor did nothing under this request id.
_UNPROVEN_REFUSALS = frozenset({"request_id_reused"})


@dataclass(frozen=True)
class Evidence:
    kind: EvidenceKind
    result: RefundResult | None = None
    refusal_code: str | None = None

    @classmethod
    def of_result(cls, result: RefundResult) -> Evidence:
        return cls("result", result=result)


@dataclass(frozen=True)
class Applied:
    refund: Refund
    changed: bool
    reason: str  # "applied", "no_change", "stale", "mismatch", "lost_race"


def target_of(current: str, evidence: Evidence) -> tuple[str | None, str | None]:
    """(target state, or None to stay; failure_code)."""
    if evidence.kind == "result":
        assert evidence.result is not None
        if evidence.result.status == "succeeded":
            return states.SUCCEEDED, None
        if evidence.result.status == "failed":
            return states.FAILED, evidence.result.failure_code or "refund_failed"
        return None, None  # pending: accepted, the final answer comes later
    if evidence.kind == "refused" and evidence.refusal_code not in _UNPROVEN_REFUSALS:
        return states.FAILED, evidence.refusal_code or "processor_refused"
    return (states.IN_DOUBT, None) if current == states.PROCESSING else (None, None)


def apply(
    connection: Connection,
    refund: Refund,
    evidence: Evidence,
    *,
    cause: str,
    actor: str,
    now_us: int,
    schedule: dict[str, Any] | None = None,
) -> Applied:
    """Move `refund` (as loaded, row-locked, in this transaction) to what `evidence` proves."""
    target, failure_code = target_of(refund.status, evidence)
    if target is None:
        return Applied(refund, False, "no_change")
    if not states.allowed(refund.status, target):
        return Applied(refund, False, "stale" if refund.status in states.TERMINAL else "no_change")
    result = evidence.result
    if result is not None and (result.amount_minor, result.currency) != (refund.amount_minor, refund.currency):
        return Applied(refund, False, "mismatch")  # never applied: the audit log keeps what was said
    reference = (result.processor_refund_id or None) if result is not None else None
    applied = service.apply(
        connection,
        refund,
        target,
        cause=cause,
        actor=actor,
        now_us=now_us,
        failure_code=failure_code,
        processor_reference=reference,
        schedule=schedule,
    )
    return Applied(applied.refund, applied.changed, "applied" if applied.changed else "lost_race")
