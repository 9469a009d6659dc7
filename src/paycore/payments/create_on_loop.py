"""A payment from the event loop (ADR 0026 decision 4: no thread hop for the data plane's
phases): `service.create_payment`'s three steps, in its order.

1. **Accept** (`accept.accept_on_loop`): planned on the loop; on SQLite its list handed to the
   writer (`Database.transaction_async`: the group commit's BEGIN IMMEDIATE and COMMIT on the
   writer thread, the statements on the loop, ADR 0012), on PostgreSQL its one call awaited on
   a connection of the loop (`db/loop_calls.py`: psycopg's `AsyncConnection`, opened as the
   engine's, its errors answered as `Database.autocommit()` answers them). No worker thread.
2. **Call**: from the loop when the transport can (`port.loop_caller`: the HTTP transport to a
   plain-HTTP processor, `processor/loop_connections.py`), with no transaction open (ADR 0006)
   and bounded by the transport's timeout as on a thread (no answer: `in_doubt`). Then
   3. **settle** (`settle.settle_on_loop`): planned on the loop, written as the accept is (the
   writer's list, or PostgreSQL's one call on the loop). No worker thread for either; only
   when the data plane leaves the settle to the reference path (`service.finish`) does that
   run on a worker thread, as before. Any other transport blocks (the sandbox in process,
   HTTPS): on SQLite `service.call_and_settle` on one worker thread (`kit.threads`), the settle
   following the call on the same thread; on PostgreSQL the thin edge does not come here then
   (`http/money/payments.py`: the whole payment on one worker thread, as before).
   Either way the two steps run to their end once begun: a cancelled request (the server
   shutting down) is cancelled only after its call and settle, as a worker thread's were.

When the accept's data plane writes nothing (a key that exists, a refusal, a limit), the whole
reference path runs on one worker thread (`service.create_payment_by_reference`), as the sync
route runs it. The transactions, their statements, their order and the answers are those of
`service.create_payment`; only the thread that waits for the accept differs. Measured by hand (a
row written by 8 callers at once, 5 alternated rounds, docs/benchmarks.md): a write handed to the
writer from the loop cost 131 µs of CPU against 237 µs for the same write on a worker thread.
A connection lost during a phase's call on PostgreSQL is answered as on the thread: the accept's
`CommitOutcomeUnknown`, the settle's `service.recorded_outcome_unknown` (the payment left to the
resolver, ADR 0006 and 0007).
"""

from __future__ import annotations

from collections.abc import Callable

from paycore.db.availability import DatabaseUnavailable
from paycore.db.engine import Database
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.errors import DomainError
from paycore.kit.threads import run_blocking, run_to_end
from paycore.payments import accept, processor_calls, settle
from paycore.payments import service as payments
from paycore.payments.service import PaymentTimings
from paycore.payments.types import NewPayment, Payment
from paycore.processor.port import CallsOnLoop, Processor, loop_caller


async def create_payment(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    new: NewPayment,
    *,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """`service.create_payment` from the loop: (response, replayed)."""
    started = await accept.accept_on_loop(database, scope, new, processing_stale_ms=timings.processing_stale_ms)
    if started is None:
        return await run_blocking(
            payments.create_payment_by_reference,
            database,
            processor,
            scope,
            new,
            timings=timings,
            render_refusal=render_refusal,
        )
    caller = loop_caller(processor)
    if caller is None:
        answer = await run_blocking(payments.call_and_settle, database, processor, scope, started, new.actor, timings)
    else:
        answer = await run_to_end(_call_and_settle_on_loop(database, caller, scope, started, new.actor, timings))
    return answer, False


async def _call_and_settle_on_loop(
    database: Database, caller: CallsOnLoop, scope: KeyScope, started: Payment, actor: str, timings: PaymentTimings
) -> Outcome:
    """`service.call_and_settle` from the loop: the call, with no transaction open, then its
    answer settled on the data plane, or by the reference path (`service.finish`) on a thread."""
    call = await processor_calls.charge_on_loop(caller, started)
    try:
        answer = await settle.settle_on_loop(database, started, call, actor=actor)
        if answer is None:
            first_retry_ms = timings.first_retry_ms
            answer = await run_blocking(
                database.transaction,
                lambda connection: payments.finish(
                    connection, scope, started, call, actor=actor, first_retry_ms=first_retry_ms
                ),
            )
        return answer
    except DatabaseUnavailable as error:
        raise payments.recorded_outcome_unknown(error) from error
