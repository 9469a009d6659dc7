"""A bad item is isolated: work over a batch of items (a worker round, a chunk of a settlement
report) that meets an item it cannot move leaves that item as it was, records why, and goes on
with the others. An item's fault is anything its own part of the work raises: a domain error
(its ledger hold resolved behind its flow's back: `TransferNotPending`), a constraint or trigger
refusing its write, a programmer's error. A database that cannot be reached, is busy or fails
its operation (`db.engine.is_database_trouble`) is nobody's item's fault: that still stops the
whole batch, and the worker backs off as a whole (`workers.loop`).

How (`transaction`): the batch's transaction first runs with no savepoint, so nothing is paid
while nothing fails. An item's part (`Isolation.run`) that raises rolls the whole transaction
back, and it runs again, careful: each item's part in a savepoint (`db.engine.savepoint`), where
the failing one's writes are undone and its `Fault` returned to the batch, which records it and
goes on. SQLite's group commit treats the calls of a group the same way (ADR 0008). A batch that
is one item (a worker round's per-item transaction) runs the same way: the calls it recorded are
kept, the move is not.

What a fault leaves (`record`): a `<object>.faulted` note on the item's audit log (the job, the
error's code and message, the item's status), a `work_faults` row (the metric
`paycore_worker_item_faults_total{job}` counts them) and a `work_fault` log line. A work item of
`in_doubt.resolver` also gets `fault_code` and `faulted_at_us`, and its next round backed off, or
none once its rounds ran out: it waits for a person (the console's queue, `/ops/faults`). A
settlement report's line that cannot be applied is a break instead (`item_not_moved`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.engine import Database, is_database_trouble, savepoint
from paycore.kit.errors import DomainError
from paycore.lifecycle import store
from paycore.lifecycle.columns import (
    ATTEMPTS,
    CLAIMED_BY,
    CLAIMED_UNTIL_US,
    FAULT_CODE,
    FAULT_CODE_LENGTH,
    FAULTED_AT_US,
    NEXT_ATTEMPT_AT_US,
)
from paycore.lifecycle.policy import Policy, next_attempt_at_us

if TYPE_CHECKING:
    from paycore.lifecycle.machine import Machine

T = TypeVar("T")
log = logging.getLogger(__name__)

MESSAGE_CHARS_MAX: Final = 500
# The worker jobs whose rounds isolate their items: every one is reported by the metric, 0 when
# none of its rounds met a fault.
JOBS: Final = (
    "resolve_payments",
    "send_refunds",
    "resolve_refunds",
    "queue_payouts",
    "send_payouts",
    "resolve_payouts",
    "rematch_webhooks",
)


@dataclass(frozen=True)
class Fault:
    """Why an item could not be moved: a domain error's code and message, or, for any other
    exception, its type only (its text may quote anything: a driver's error quotes the
    statement's parameters; the `work_fault` log line has the traceback)."""

    code: str
    message: str

    @classmethod
    def of(cls, error: BaseException) -> Fault:
        if isinstance(error, DomainError):
            return cls(error.code[:FAULT_CODE_LENGTH], error.message[:MESSAGE_CHARS_MAX])
        name = type(error).__name__[:FAULT_CODE_LENGTH]
        return cls(name, f"{name}: an unexpected error (the log has it: event work_fault)")


class ItemFailed(Exception):
    """An item's part raised in a run with no savepoint: the whole transaction rolls back and
    runs again, careful (`transaction`)."""

    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.message)
        self.fault = fault


@dataclass(frozen=True)
class Isolation:
    """How a batch's transaction runs its items' parts: at first as they are (`careful` False),
    then each in a savepoint."""

    careful: bool = False

    def run(self, connection: Connection, work: Callable[[], T], *, about: Mapping[str, str]) -> T | Fault:
        """`work()`'s result, or (careful) the `Fault` of an item whose part raised, its writes
        undone. `about`: the item's ids, for the log line (never more: no account, no token)."""
        if not self.careful:
            try:
                return work()
            except Exception as error:
                if is_database_trouble(error):
                    raise
                raise ItemFailed(Fault.of(error)) from error
        return caught(partial(_in_savepoint, connection, work), about=about)


def _in_savepoint(connection: Connection, work: Callable[[], T]) -> T:
    with savepoint(connection):
        return work()


def caught(work: Callable[[], T], *, about: Mapping[str, str]) -> T | Fault:
    """`work()`'s result, or the `Fault` of an item whose part raised (logged), the database's
    trouble raised on: a careful run's part, or one outside any transaction (a worker building
    its call for the item)."""
    try:
        return work()
    except Exception as error:
        if is_database_trouble(error):
            raise
        fault = Fault.of(error)
        _log(fault, error, about)
        return fault


def transaction(database: Database, work: Callable[..., T]) -> T:
    """`database.transaction(work)` with `work(connection, isolation=...)` running each item's
    part through `isolation.run`: at first with no savepoint; when an item's part raises, once
    more, careful, with the failing items' faults handed to `work` (see the module)."""
    try:
        return database.transaction(partial(work, isolation=Isolation(careful=False)))
    except ItemFailed:
        return database.transaction(partial(work, isolation=Isolation(careful=True)))


def record(
    connection: Connection,
    tenant_id: str,
    fault: Fault,
    *,
    job: str,
    object_type: str,
    object_id: str,
    status: str,
    actor: str,
    now_us: int,
) -> None:
    """The fault, in the batch's transaction: a note on the item's audit log (`status`: its
    public status, which the fault left as it was) and its `work_faults` row."""
    data: dict[str, Any] = {"job": job, "error": fault.code, "message": fault.message, "status": status}
    event_id = audit.record_other(
        connection,
        tenant_id,
        kind="note",
        type=f"{object_type}.faulted",
        object_type=object_type,
        object_id=object_id,
        cause="work_fault",
        actor=actor,
        now_us=now_us,
        data=data,
    )
    store.insert_fault(connection, tenant_id, event_id, job=job, now_us=now_us)


def left(
    connection: Connection,
    machine: Machine[Any],
    item: Any,
    fault: Fault,
    *,
    job: str,
    actor: str,
    now_us: int,
    policy: Policy | None,
    rng: random.Random,
) -> None:
    """`item` (a claimed row or a loaded item) left in its status with `fault` recorded
    (`record`, and its `fault_code`). With `policy` (the round holds it): its round
    counted (`attempts`) and its next one backed off, or none once its rounds ran out
    (then a person's, from the console); without, its schedule stays its holder's."""
    tenant_id, item_id, status = _field(item, "tenant_id"), _field(item, "id"), _field(item, "status")
    values: dict[str, Any] = {FAULT_CODE: fault.code, FAULTED_AT_US: now_us}
    if policy is not None:
        attempts = int(_field(item, ATTEMPTS)) + 1
        due = next_attempt_at_us(attempts, policy, rng, now_us=now_us, give_up=True)
        values.update({ATTEMPTS: attempts, NEXT_ATTEMPT_AT_US: due, CLAIMED_BY: None, CLAIMED_UNTIL_US: None})
    statuses = machine.spellings((status,))
    store.set_values(connection, machine.table, tenant_id, item_id, values, statuses=statuses)
    public = machine.public(status)
    record(
        connection,
        tenant_id,
        fault,
        job=job,
        object_type=machine.object_type,
        object_id=item_id,
        status=public,
        actor=actor,
        now_us=now_us,
    )


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


def counts_by_job(connection: Connection) -> dict[str, int]:
    """Faults met by each job's rounds, ever (0 for a job with none): what /metrics reports."""
    return {**dict.fromkeys(JOBS, 0), **store.faults_by_job(connection)}


def _log(fault: Fault, error: BaseException, about: Mapping[str, str]) -> None:
    extra = {"event": "work_fault", "error": fault.code, **about}
    if isinstance(error, DomainError):  # its message is paycore's own: no traceback needed
        log.warning("an item could not be moved, left for a person: %s", fault.message, extra=extra)
    else:
        log.exception("an item could not be moved, left for a person: %s", fault.code, extra=extra)
