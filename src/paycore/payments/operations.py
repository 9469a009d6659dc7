"""Capture later (SPEC §6.1): a manual payment's capture and cancel, each as its charge went out:
commit, call the processor outside any transaction, commit.

1. One transaction claims the request's own idempotency key *open*, loads the payment (row-
   locked on PostgreSQL) and, only from `requires_capture`, moves it to `processing` with the
   operation (`capture` | `cancel`), the key and, for a capture, the amount asked: the one
   compare-and-set a concurrent capture, cancel, webhook or expiry also needs, so exactly one
   of them wins. A refusal (409 `payment_not_capturable` / `payment_not_cancelable` with the
   payment as it is, 422 `amount_too_large`) is recorded under the key and changes nothing.
2. The processor is called with no transaction open, with the operation's stable request id
   (`processor_calls.operation_request_id`): a retry can never capture twice.
3. One transaction records the call and applies its evidence through the payment's lifecycle
   (`lifecycle.apply_evidence`): `captured` -> `succeeded` (the ledger posts what was captured
   and releases the rest, in one step), `canceled`/`expired` -> `canceled` (all released), a
   refusal -> `requires_capture` again (the processor did nothing), no answer -> `in_doubt`
   with `in_doubt_operation`, which only evidence ends (a webhook, the resolver's status query).
   Whoever settles the outcome first records the request's answer (`settle_operation_response`).

A crash between 1 and 3 leaves a `processing` payment that the resolver takes after
`processing_stale_ms`; it asks the processor first and sends the same request again only
while the charge is still authorized (`processor_calls.ask`).

Sync, on one worker thread: the FastAPI routes' and, with a transport that blocks (in process,
HTTPS), the thin edge's. With a transport that calls from the event loop, the thin edge runs the
same steps from the loop (`operations_on_loop.py`), and this module's `operate_by_reference`
(begin's data plane wrote nothing) and `finish_by_reference` where its own do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from sqlalchemy import Connection

from paycore.db.availability import CommitOutcomeUnknown, DatabaseUnavailable
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome, RefusalToRecord
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.errors import DomainError
from paycore.lifecycle.calls import Call
from paycore.lifecycle.calls import record as record_call
from paycore.lifecycle.columns import NEXT_ATTEMPT_AT_US
from paycore.lifecycle.store import set_values
from paycore.payments import capture as capture_phases
from paycore.payments import capture_plan, lifecycle, processor_calls, settle_plan, states
from paycore.payments.errors import AmountTooLarge, PaymentNotCancelable, PaymentNotCapturable
from paycore.payments.models import payments
from paycore.payments.schemas import capturable_minor, operation_outcome, payment_object
from paycore.payments.service import PaymentTimings, await_answer
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult, Processor

CAUSES: Final = capture_plan.CAUSES  # the audit cause of the move a capture or cancel request makes


def capture(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    payment_id: str,
    amount_minor: int | None,
    *,
    actor: str,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """Capture `amount_minor` (None: all that is capturable) of an authorization. Returns
    (response, replayed)."""
    return _operate(
        database, processor, scope, payment_id, states.CAPTURE, amount_minor, actor, timings, render_refusal
    )


def cancel(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    payment_id: str,
    *,
    actor: str,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """Cancel (void) an authorization: all of it is released. Returns (response, replayed)."""
    return _operate(database, processor, scope, payment_id, states.CANCEL, None, actor, timings, render_refusal)


def _operate(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    payment_id: str,
    operation: str,
    amount_minor: int | None,
    actor: str,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    # The plain case on the data plane (`capture.py`); everything else through `_begin`.
    started = capture_phases.begin(
        database, scope, payment_id, operation, amount_minor, actor=actor, stale_ms=timings.processing_stale_ms
    )
    if started is None:
        return operate_by_reference(
            database, processor, scope, payment_id, operation, amount_minor, actor, timings, render_refusal
        )
    return _call_and_finish(database, processor, scope, started, actor, timings), False


def operate_by_reference(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    payment_id: str,
    operation: str,
    amount_minor: int | None,
    actor: str,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """`_operate` once begin's data plane wrote nothing (also `operations_on_loop`'s, on a worker
    thread): step 1 by the reference path, then as `_operate`. Blocking. Returns (response, replayed)."""

    def begin(connection: Connection) -> Payment | Outcome | None:
        return _begin(connection, scope, payment_id, operation, amount_minor, actor, timings, render_refusal)

    try:
        started = database.transaction(begin)
    except RefusalToRecord as refusal:
        outcome = refusal.outcome
        return database.transaction(lambda connection: idempotency.record_refusal(connection, scope, outcome))
    if isinstance(started, Outcome):
        return started, True
    if started is None:
        return await_answer(database, scope, timings.wait_ms), True
    return _call_and_finish(database, processor, scope, started, actor, timings), False


def _call_and_finish(
    database: Database, processor: Processor, scope: KeyScope, started: Payment, actor: str, timings: PaymentTimings
) -> Outcome:
    """Steps 2 and 3: the call, with no transaction open, then its answer recorded on the data
    plane or, where it wrote nothing, by the reference path (`finish_by_reference`)."""
    call = processor_calls.send_operation(processor, started)
    try:
        answer = capture_phases.finish(database, started, call, actor=actor)
        if answer is not None:
            return answer
        first_retry_ms = timings.first_retry_ms
        return database.transaction(
            lambda connection: finish_by_reference(connection, scope, started, call, actor, first_retry_ms)
        )
    except DatabaseUnavailable as error:
        raise outcome_unknown(started, error) from error


def outcome_unknown(started: Payment, error: DatabaseUnavailable) -> CommitOutcomeUnknown:
    """The operation was sent, and its answer may or may not be recorded: the payment is the
    resolver's (ADR 0006), the request's answer 503 with the commit's outcome unknown."""
    return CommitOutcomeUnknown(f"the {started.operation} was sent but its answer could not be recorded: {error}")


def _begin(
    connection: Connection,
    scope: KeyScope,
    payment_id: str,
    operation: str,
    amount_minor: int | None,
    actor: str,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> Payment | Outcome | None:
    """Step 1: the payment moved to `processing` with its operation; or the key's recorded
    answer (None: its first request has no answer yet)."""
    if not idempotency.claim_open(connection, scope):
        return idempotency.recorded(connection, scope)
    try:
        return _start(connection, scope, payment_id, operation, amount_minor, actor, timings)
    except DomainError as error:
        if not error.recorded:
            raise  # 404 and the like roll back: the key stays free
        raise RefusalToRecord(render_refusal(error)) from error


def _start(
    connection: Connection,
    scope: KeyScope,
    payment_id: str,
    operation: str,
    amount_minor: int | None,
    actor: str,
    timings: PaymentTimings,
) -> Payment:
    payment = lifecycle.MACHINE.load(connection, scope.tenant_id, payment_id, for_update=True)
    if payment.status != states.REQUIRES_CAPTURE:
        raise _not_possible(payment, operation)
    requested = None
    if operation == states.CAPTURE:
        capturable = capturable_minor(payment)
        requested = capturable if amount_minor is None else amount_minor
        if requested > capturable:
            raise AmountTooLarge(f"at most {capturable} is capturable, {requested} was asked", param="amount_minor")
        assert 0 < requested <= capturable <= payment.amount_minor
    now = scope.now_us
    values = {
        "operation": operation,
        "operation_idempotency_key": scope.key,
        "capture_requested_minor": requested,
        NEXT_ATTEMPT_AT_US: now + timings.processing_stale_ms * 1000,  # the resolver's, if we die
    }
    moved = lifecycle.MACHINE.move(
        connection, payment, states.PROCESSING, cause=CAUSES[operation], actor=actor, now_us=now, values=values
    )
    if not moved.changed:
        raise _not_possible(moved.item, operation)
    assert moved.item.operation == operation and moved.item.status == states.PROCESSING
    return moved.item


def _not_possible(payment: Payment, operation: str) -> DomainError:
    error = PaymentNotCapturable if operation == states.CAPTURE else PaymentNotCancelable
    verb = "captured" if operation == states.CAPTURE else "canceled"
    return error(
        f"the payment is {payment.status}: only a payment in requires_capture can be {verb}",
        payment=payment_object(payment),
    )


def finish_by_reference(
    connection: Connection, scope: KeyScope, started: Payment, call: Call[ChargeResult], actor: str, first_retry_ms: int
) -> Outcome:
    """Step 3 by the reference path, in the caller's transaction: the call recorded, its evidence
    applied, the answer."""
    now = clock_now_us()
    payment = lifecycle.MACHINE.load(connection, started.tenant_id, started.id, for_update=True)
    record_call(
        connection,
        payment.tenant_id,
        object_type="payment",
        object_id=payment.id,
        call=call,
        attempt=None,
        actor=actor,
        now_us=now,
    )
    due = {NEXT_ATTEMPT_AT_US: now + first_retry_ms * 1000}  # no answer: the resolver asks soon
    applied = lifecycle.apply_evidence(
        connection, payment, call.evidence, cause=settle_plan.CAUSE, actor=actor, now_us=now, values=due
    )
    if not applied.changed and applied.item.status in states.UNRESOLVED:
        set_values(connection, payments, payment.tenant_id, payment.id, due)
    answer = idempotency.recorded(connection, scope)
    if answer is not None:
        return answer  # settled in this transaction, or before it by a webhook or the resolver
    # Still `processing` (the processor's answer proved nothing yet): 202 with the payment.
    outcome = operation_outcome(applied.item if applied.item.operation else started)
    idempotency.complete(connection, scope.tenant_id, scope.key, outcome)
    return outcome
