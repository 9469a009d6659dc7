"""A payout's settle phase as the worker's rounds apply it (ADR 0026 step 3; `in_doubt.plane`):
the bank's `accepted` (to `sent`, the hold posted) or `rejected` (to `failed`, the hold voided),
answering the round's send or status query, for a payout still `processing` or `in_doubt`,
written by the phase the bank's webhook writes it with (`settle_plan.plan_move`;
`settle_repository.settle_call`, one call of `paycore_payouts_settle`, on PostgreSQL;
`settle_repository.write_move`, the fixed list, on SQLite). Every other answer (a refusal, no
answer, `settled` or `returned`, a payout `sent` already) is the reference path's
(`lifecycle.apply_evidence`)."""

from __future__ import annotations

from typing import Final

from paycore.in_doubt.plane import Settle, hold_resolution_ids
from paycore.payouts import lifecycle, settle_plan, settle_repository
from paycore.payouts.settle_plan import Move
from paycore.payouts.types import Payout


def _moved(move: Move) -> Payout:
    return move.payout


ROUND: Final = Settle(
    machine=lifecycle.MACHINE,
    settled_status=settle_plan.settled_status,
    plan_move=settle_plan.plan_move,
    new_ids=hold_resolution_ids(settle_plan.NewIds),
    moved=_moved,
    write_move=settle_repository.write_move,
    call=settle_repository.settle_call,
)
