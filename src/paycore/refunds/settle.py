"""A refund's settle phase as the worker's rounds apply it (ADR 0026 step 3; `in_doubt.plane`):
the processor's `succeeded` or `failed`, answering the round's send or status query, for a refund
still `processing` or `in_doubt`, written by the phase the processor's webhook writes it with
(`settle_plan.plan_move`; `settle_repository.settle_call`, one call of `paycore_refunds_settle`,
on PostgreSQL; `settle_repository.write_move`, the fixed list, on SQLite). Every other answer is
the reference path's (`lifecycle.MACHINE.apply_evidence`)."""

from __future__ import annotations

from typing import Final

from paycore.in_doubt.plane import Settle, hold_resolution_ids
from paycore.refunds import lifecycle, settle_plan, settle_repository
from paycore.refunds.settle_plan import Move
from paycore.refunds.types import Refund


def _moved(move: Move) -> Refund:
    return move.refund


ROUND: Final = Settle(
    machine=lifecycle.MACHINE,
    settled_status=settle_plan.settled_status,
    plan_move=settle_plan.plan_move,
    new_ids=hold_resolution_ids(settle_plan.NewIds),
    moved=_moved,
    write_move=settle_repository.write_move,
    call=settle_repository.settle_call,
)
