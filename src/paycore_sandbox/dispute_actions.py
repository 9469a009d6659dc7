"""A merchant's answers to a dispute (SPEC §6.2): evidence, or accepting it. Each is a request
of its own, deduped on its request id (`sandbox_dispute_actions`), like a capture: a repeat
answers the dispute as it is now, other parameters are refused `request_id_reused`, and a
refusal stores nothing.

Only an open dispute takes an answer: a chargeback in `needs_response`, an inquiry in
`warning_needs_response` that has no evidence yet; anything else is 409 `dispute_not_open`. A
dispute whose deadline has passed is closed (or escalated) by the call that finds it so, which
commits that and answers `dispute_not_open`, so an answer after the deadline never counts
even when the background round has not run yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection

from paycore.kit import clock
from paycore.processor.port import ProcessorRefused
from paycore_sandbox import dispute_repository
from paycore_sandbox.disputes import (
    AcceptRequest,
    DisputeResult,
    EvidenceRequest,
    change,
    closing,
    decision,
    result,
    step,
)
from paycore_sandbox.faults import Decision
from paycore_sandbox.limits import SandboxSettings

Outcome = DisputeResult | ProcessorRefused


def submit_evidence(
    connection: Connection, request: EvidenceRequest, faults: Decision, settings: SandboxSettings, now_us: int
) -> Outcome:
    """Evidence (or its replay): a chargeback goes `under_review`, an inquiry stays
    `warning_needs_response` with its evidence; either is decided `dispute_decision_after_ms`
    later by the background (disputes.step)."""
    found = _answerable(connection, request, "evidence", request.text, settings, now_us)
    if not isinstance(found, dict):
        return found
    values = {
        "status": "under_review" if found["type"] == "chargeback" else found["status"],
        "evidence_submitted_at_us": now_us,
        "planned_decision": decision(request.text, settings.dispute_decision_seed),
        "next_step_at_us": now_us + settings.dispute_decision_after_ms * 1_000,
    }
    return _changed(change(connection, found, values, "updated", faults, now_us), request.dispute_id)


def accept(
    connection: Connection, request: AcceptRequest, faults: Decision, settings: SandboxSettings, now_us: int
) -> Outcome:
    """Accept (or its replay): a chargeback is `lost` now, an inquiry `warning_closed`."""
    found = _answerable(connection, request, "accept", None, settings, now_us)
    if not isinstance(found, dict):
        return found
    status = "lost" if found["type"] == "chargeback" else "warning_closed"
    return _changed(change(connection, found, closing(status, now_us), "closed", faults, now_us), request.dispute_id)


def _answerable(
    connection: Connection,
    request: EvidenceRequest | AcceptRequest,
    kind: str,
    text: str | None,
    settings: SandboxSettings,
    now_us: int,
) -> dict[str, Any] | Outcome:
    """The open dispute this new request answers (its action stored); or the outcome to give
    instead: a replay, or a refusal that commits a deadline found passed."""
    asked = {"kind": kind, "merchant_id": request.merchant_id, "dispute_id": request.dispute_id, "text": text}
    replayed = _replay(connection, request.request_id, asked)
    if replayed is not None:
        return replayed
    dispute = dispute_repository.find(connection, request.dispute_id)
    # Another merchant's dispute is not found, rather than refused, so as not to reveal it.
    if dispute is None or dispute["merchant_id"] != request.merchant_id:
        raise ProcessorRefused("dispute_not_found", f"no dispute {request.dispute_id!r} for this merchant")
    if _takes_answers(dispute) and dispute["next_step_at_us"] <= now_us and step(connection, dispute, settings, now_us):
        due_by = clock.to_rfc3339(dispute["evidence_due_by_us"])
        return ProcessorRefused("dispute_not_open", f"the evidence window of {request.dispute_id} ended at {due_by}")
    # Claimed before the status check: a concurrent call with this request id that committed
    # first is replayed, never refused for the state it left (a refusal rolls this back).
    action = {**asked, "request_id": request.request_id, "created_at_us": now_us}
    if not dispute_repository.insert_action(connection, action):
        replayed = _replay(connection, request.request_id, asked)
        assert replayed is not None, "the insert conflicted with a committed row"
        return replayed
    if not _takes_answers(dispute):
        raise _not_open(dispute)
    return dispute


def _takes_answers(dispute: Mapping[str, Any]) -> bool:
    if dispute["status"] == "needs_response":
        return True
    return dispute["status"] == "warning_needs_response" and dispute["evidence_submitted_at_us"] is None


def _not_open(dispute: Mapping[str, Any]) -> ProcessorRefused:
    state = dispute["status"] + (" with its evidence in" if dispute["evidence_submitted_at_us"] is not None else "")
    return ProcessorRefused("dispute_not_open", f"dispute {dispute['dispute_id']} is {state}: it takes no answer now")


def _replay(connection: Connection, request_id: str, asked: Mapping[str, Any]) -> DisputeResult | None:
    existing = dispute_repository.find_action(connection, request_id)
    if existing is None:
        return None
    differing = [name for name in asked if existing[name] != asked[name]]
    if differing:
        raise ProcessorRefused(
            "request_id_reused", f"request id {request_id!r} was used with other parameters ({', '.join(differing)})"
        )
    dispute = dispute_repository.find(connection, existing["dispute_id"])
    assert dispute is not None, "a dispute is never deleted"
    return result(dispute)


def _changed(after: dict[str, Any] | None, dispute_id: str) -> Outcome:
    if after is None:  # the row's lock was taken by another change between our read and write
        raise ProcessorRefused("dispute_not_open", f"dispute {dispute_id} was changed by another call meanwhile")
    return result(after)
