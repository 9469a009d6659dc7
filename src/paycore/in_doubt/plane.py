"""A worker round's plain answer applied by the item's settle phase, on the data plane (ADR 0026
step 3): a payment's (`payments/settle.py`'s `ROUND`), a refund's (`refunds/settle.py`) and a
payout's (`payouts/settle.py`), the same phases the processor's and the bank's webhooks use
(`payments/move_plan.py`, `refunds/settle_plan.py`, `payouts/settle_plan.py`).

The round (`resolver._finish`) has made its calls with no transaction open, and, in the item's
one transaction, loaded it row-locked and recorded each call as an attempt. Where the last
call's answer is a result that settles the item in one step (a charge's or a refund's
`succeeded` or `failed`; the bank's `accepted` or `rejected`), of the item's amount and currency,
for an item in the state the phase expects (and ready for it, where the phase reads something
first: a payment `processing` must have its creating request answered, `Settle.ready`), this
writes the move: on PostgreSQL one call of the phase's function (`paycore_payments_settle`
without a call or an answer, `paycore_refunds_settle`, `paycore_payouts_settle`) on the round's
connection, on SQLite the phase's fixed list (`settle_repository.write_move`; a payment's
`write_round_move`). Where the round holds the item, its schedule
(`attempts`, the next round, the lease cleared) is written with the move, as the reference path
writes it (`plan_move`'s `values`): on SQLite in the list's compare-and-set; on PostgreSQL, whose
functions write the move's own columns only, by one UPDATE of the row the round holds, just
before the call, whose compare-and-set then expects the item as it is after it (its time
unchanged). Either way the row and the state event's snapshot are the reference path's.

Everything else answers None, having written nothing, and the reference path
(`Machine.apply_evidence` through the job's `apply`) decides: `pending`, no answer, "no record"
(the round sends again), a refusal, a mismatch, a move of more than one step, an item in any
other state. A compare-and-set that finds the item changed, or a refused write (the hold not
pending, the ceiling not holding the amount), raises, having written part of the move: the
round's transaction rolls back and runs again careful (`lifecycle.faults`), without the data
plane.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from paycore.audit.rows import EventContext
from paycore.db import driver
from paycore.db.engine import after_commit
from paycore.kit import ids
from paycore.ledger import service as ledger
from paycore.lifecycle.evidence import Applied, Decision, Evidence
from paycore.lifecycle.machine import Item, Machine, replaced

T = TypeVar("T", bound=Item)
M = TypeVar("M")


class NotAsRead(Exception):
    """The settle phase found the item changed under the round's lock: roll back, the reference
    path decides in the careful run."""


@dataclass(frozen=True)
class Settle(Generic[T, M]):
    """One object's settle phase, as a round applies it: its plan and its two writes."""

    machine: Machine[T]
    settled_status: Callable[[T, Decision], str | None]  # `settle_plan.settled_status`
    plan_move: Callable[..., M]  # `settle_plan.plan_move` (a payment's: `move_plan`)
    new_ids: Callable[[], Any]  # the plan's new ids, in the reference path's order
    moved: Callable[[M], T]  # the item as the move leaves it
    write_move: Callable[[Connection, M], list[Any] | None]  # SQLite: the fixed list; None when moved first
    call: Callable[[Connection, M], bool]  # PostgreSQL: the one call; False when moved first
    # A read the phase needs of the item before it takes it (a payment `processing`: its creating
    # request answered, which the move does not write); False: the reference path's. None: none.
    ready: Callable[[Connection, T], bool] | None = None

    def __call__(
        self,
        connection: Connection,
        item: T,
        evidence: Evidence[Any],
        *,
        cause: str,
        actor: str,
        now_us: int,
        values: Mapping[str, Any] | None = None,
    ) -> Applied[T] | None:
        """`item` (loaded, row-locked) moved by its settle phase as `evidence` proves, with
        `values` (the round's schedule); None, having written nothing, for the reference path."""
        result = evidence.result
        if evidence.kind != "result" or result is None or not self.machine.matches(item, result):
            return None
        decision = self.machine.decide(item.status, evidence)
        target = self.settled_status(item, decision)
        if target is None or (self.ready is not None and not self.ready(connection, item)):
            return None
        postgres = connection.dialect.name == "postgresql"
        if postgres and values:
            # The phase's function writes the move's own columns only: the schedule first, on the
            # row the round holds (its time unchanged), and the move planned from the item so.
            write_schedule(connection, self.machine.table.name, item, values)
            item, values = replaced(item, values), None
        move = self.plan_move(
            item,
            target,
            decision,
            cause=cause,
            actor=actor,
            now_us=max(now_us, item.updated_at_us + 1),  # as `Machine.changes` never goes back
            new_ids=self.new_ids(),
            context=EventContext.current(),
            values=values,
        )
        if postgres:
            written, accounts = self.call(connection, move), None
        else:
            accounts = self.write_move(connection, move)  # the schedule in its compare-and-set
            written = accounts is not None
        if not written:
            raise NotAsRead(f"{self.machine.object_type} {item.id} is not as read under the round's lock")
        if accounts:
            # The hold's accounts as written, cached once committed, as `apply_object` does.
            after_commit(partial(ledger.remember_accounts, item.tenant_id, accounts))
        return Applied(self.moved(move), True, "applied")


def hold_resolution_ids(new_ids: Callable[..., Any]) -> Callable[[], Any]:
    """The new ids of a move that resolves a hold (a refund's, a payout's `settle_plan.NewIds`) in
    the reference path's order: the resolution, the hold's debited side's entry, its credited
    side's, the state event (ids made in one process increase)."""

    def make() -> Any:
        return new_ids(
            resolution_id=ids.new_id("txn"),
            debit_entry_id=ids.new_id("ent"),
            credit_entry_id=ids.new_id("ent"),
            state_event_id=ids.new_id("evt"),
        )

    return make


def write_schedule(connection: Connection, table: str, item: Item, values: Mapping[str, Any]) -> None:
    """The round's schedule (`values`: the work columns) written on the row the round holds."""
    names = tuple(sorted(values))
    params = (*(values[name] for name in names), item.tenant_id, item.id)
    assert driver.execute(connection, _schedule(table, names), params) == 1, (table, item.id)


@cache
def _schedule(table: str, names: tuple[str, ...]) -> driver.Statement:
    assignments = ", ".join(f"{name} = ?" for name in names)
    return driver.statement(f"UPDATE {table} SET {assignments} WHERE tenant_id = ? AND id = ?")
