"""A payment from the event loop, on SQLite (ADR 0026 decision 4: no thread hop for the data
plane's accept): `service.create_payment`'s three steps, in its order.

1. **Accept** (`accept.accept_on_loop`): planned on the loop, its list handed to the writer
   (`Database.transaction_async`: the group commit's BEGIN IMMEDIATE and COMMIT on the writer
   thread, the statements on the loop, ADR 0012). No worker thread.
2. **Call** and 3. **settle** (`service.call_and_settle`), on one worker thread (`kit.threads`):
   the processor's transports block, and the settle phase follows the call on the same thread
   (its write joins the same group commit queue), as before.

When the accept's data plane writes nothing (a key that exists, a refusal, a limit), the whole
reference path runs on one worker thread (`service.create_payment_by_reference`), as the sync
route runs it. The transactions, their statements, their order and the answers are those of
`service.create_payment`; only the thread that waits for the accept differs. Measured by hand (a
row written by 8 callers at once, 5 alternated rounds, docs/benchmarks.md): a write handed to the
writer from the loop cost 131 µs of CPU against 237 µs for the same write on a worker thread.

PostgreSQL keeps `service.create_payment` on one worker thread: its phases are one blocking call
each on a pooled connection.
"""

from __future__ import annotations

from collections.abc import Callable

from paycore.db.engine import Database
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.errors import DomainError
from paycore.kit.threads import run_blocking
from paycore.payments import accept
from paycore.payments import service as payments
from paycore.payments.service import PaymentTimings
from paycore.payments.types import NewPayment
from paycore.processor.port import Processor


async def create_payment(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    new: NewPayment,
    *,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """`service.create_payment` from the loop, on SQLite: (response, replayed)."""
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
    answer = await run_blocking(payments.call_and_settle, database, processor, scope, started, new.actor, timings)
    return answer, False
