"""An authorization's capture and cancel from the event loop (ADR 0026 decision 4: no thread hop
for the data plane's phases; ADR 0029): `operations.capture` and `cancel`'s three steps, in
their order.

1. **begin** (`capture.begin_on_loop`): planned on the loop; on SQLite its transaction (the
   authorization's read and the fixed list) handed to the writer (`Database.transaction_async`:
   the group commit's BEGIN IMMEDIATE and COMMIT on the writer thread, the statements on the
   loop, ADR 0012), on PostgreSQL its read and its one call awaited on connections of the loop
   (`db/loop_calls.py`, their errors answered as `Database.read()` and `autocommit()` answer
   them). No worker thread.
2. **The call** (`processor_calls.send_operation_on_loop`): the capture or cancel from the loop
   (`port.loop_caller`: the HTTP transport to a plain-HTTP processor), with no transaction open
   (ADR 0006), bounded by the transport's timeout as on a thread (no answer in time, a lost
   answer: `ProcessorUnreachable`, so `in_doubt`, never failed). Then
3. **finish** (`capture.finish_on_loop`): planned on the loop, written as begin is (the
   writer's list, or PostgreSQL's one call on the loop). Where it writes nothing (a refusal, no
   answer: in doubt; an expiry; a payment moved first), the reference path decides
   (`operations.finish_by_reference`): on SQLite from the loop too (it calls no processor: one
   transaction handed to the writer), on PostgreSQL on one worker thread (`kit.threads`), the
   rare path. Steps 2 and 3 run to their end once begun: a cancelled request (the server
   shutting down) is cancelled only after its call and finish, as a worker thread's were.

When begin's data plane writes nothing (a key that exists, a refusal, a payment missing or not
`requires_capture`, a race lost), the whole reference path (`operations.operate_by_reference`:
its begin, its wait for a first request's answer, its call, its finish) runs on one worker
thread, as the FastAPI route runs it. The thin edge comes here only with a transport that can
call from the loop (`http/money/payment_operations.py`); with one that blocks (in process,
HTTPS) the whole answer stays on one worker thread, as before.

The transactions, their statements, their order and the answers are those of
`operations.capture` and `cancel`: a lock wait past its bound is answered at once
(`idempotency.waited_too_long`); a connection lost during a phase's call on PostgreSQL is
answered as on the thread: begin's `CommitOutcomeUnknown`, finish's `operations.outcome_unknown`
(the payment left to the resolver, ADR 0006 and 0007).
"""

from __future__ import annotations

from collections.abc import Callable

from paycore.db.availability import DatabaseUnavailable
from paycore.db.engine import Database
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.errors import DomainError
from paycore.kit.threads import run_blocking, run_to_end
from paycore.payments import capture as capture_phases
from paycore.payments import operations, processor_calls, states
from paycore.payments.service import PaymentTimings
from paycore.payments.types import Payment
from paycore.processor.port import CallsOnLoop, Processor, loop_caller


async def capture(
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
    """`operations.capture` from the loop: (response, replayed)."""
    return await _operate(
        database, processor, scope, payment_id, states.CAPTURE, amount_minor, actor, timings, render_refusal
    )


async def cancel(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    payment_id: str,
    *,
    actor: str,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """`operations.cancel` from the loop: (response, replayed)."""
    return await _operate(database, processor, scope, payment_id, states.CANCEL, None, actor, timings, render_refusal)


async def _operate(
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
    caller = loop_caller(processor)
    assert caller is not None, "a transport that blocks is answered on a worker thread (the thin edge)"
    started = await capture_phases.begin_on_loop(
        database, scope, payment_id, operation, amount_minor, actor=actor, stale_ms=timings.processing_stale_ms
    )
    if started is None:
        return await run_blocking(
            operations.operate_by_reference,
            database,
            processor,
            scope,
            payment_id,
            operation,
            amount_minor,
            actor,
            timings,
            render_refusal,
        )
    assert started.operation == operation and started.status == states.PROCESSING, started
    return await run_to_end(_call_and_finish(database, caller, scope, started, actor, timings)), False


async def _call_and_finish(
    database: Database, caller: CallsOnLoop, scope: KeyScope, started: Payment, actor: str, timings: PaymentTimings
) -> Outcome:
    """`operations._call_and_finish` from the loop: the call, with no transaction open, then its
    answer recorded on the data plane, or by the reference path."""
    call = await processor_calls.send_operation_on_loop(caller, started)
    first_retry_ms = timings.first_retry_ms
    try:
        answer = await capture_phases.finish_on_loop(database, started, call, actor=actor)
        if answer is not None:
            return answer
        # SQLite: the writer's group commit, from the loop; PostgreSQL: one worker thread.
        return await database.transaction_async(
            lambda connection: operations.finish_by_reference(connection, scope, started, call, actor, first_retry_ms)
        )
    except DatabaseUnavailable as error:
        raise operations.outcome_unknown(started, error) from error
