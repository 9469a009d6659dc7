"""A refund from the event loop (ADR 0026 decision 4: no thread hop): `create.create_refund`'s
two steps, in its order, for the refunds' thin edge (`http/money/refunds.py`).

1. **The write** (`create.write_on_loop`): planned on the loop; on PostgreSQL the payment's read
   (where this process has not seen it) and the one call of `paycore_refunds_create`, each
   awaited on a connection of the loop's own (`db/loop_calls.py`); on SQLite the fixed list,
   its reads inside the transaction, handed to the writer (`Database.transaction_async`: the
   group commit's BEGIN IMMEDIATE and COMMIT on the writer thread, the statements on the loop).
   No worker thread. A refund's creation calls no processor (a worker sends it later).
2. **The reference path**, when the write has written nothing (a key that exists, a refusal, a
   refund that needs approval, a limit): `idempotency.run_on_loop`, the same effect in the key's
   transaction: on SQLite handed to the writer from the loop, on PostgreSQL on one worker
   thread, as the sync route runs it (the rare path).

The transactions, their statements, their order and the answers are those of
`create.create_refund`; only the thread that waits for them differs. A lock wait past its bound
is answered at once (`idempotency.waited_too_long`), and a connection lost during the call on
PostgreSQL is `CommitOutcomeUnknown`, as on the thread.
"""

from __future__ import annotations

from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome
from paycore.refunds import create
from paycore.refunds.create import RenderRefusal
from paycore.refunds.create_plan import RefundRequest, Render


async def create_refund(
    database: Database,
    scope: KeyScope,
    request: RefundRequest,
    *,
    render: Render,
    render_refusal: RenderRefusal,
) -> tuple[Outcome, bool]:
    """`create.create_refund` from the loop: (outcome, replayed), once per key."""
    written = await create.write_on_loop(database, scope, request, render)
    if written is not None:
        return written.answer, False
    effect = create.reference_effect(scope, request, render)
    return await idempotency.run_on_loop(database, scope, effect, render_refusal)
