"""What the lifecycle writes beside a status change: an item's birth (`create`: stored in its
first state with the audit event of it), the audit event of each change (`record`, which
`Machine.move` writes in the move's transaction; published to the tenant's webhook endpoints
when the machine renders a snapshot, ADR 0015), and a person asking the other system again
(`ask_again`: the item made due, and a note in the audit log).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, insert

from paycore.audit import rows as audit_rows
from paycore.audit import service as audit
from paycore.kit import ids
from paycore.lifecycle import store
from paycore.lifecycle.columns import FAULT_CODE

if TYPE_CHECKING:
    from paycore.lifecycle.machine import Item, Machine

T = TypeVar("T", bound="Item")


def create(
    connection: Connection,
    machine: Machine[T],
    item: T,
    *,
    cause: str,
    actor: str,
    data: dict[str, Any] | None = None,
) -> T:
    """Store a new item in its first state, with the audit event of its birth (from no state),
    in the caller's transaction. Returns `item`: what was inserted, no re-read."""
    connection.execute(insert(machine.table), machine.to_row(item))
    record(connection, machine, item, None, cause=cause, actor=actor, now_us=item.updated_at_us, data=data)
    return item


def record(
    connection: Connection,
    machine: Machine[T],
    item: T,
    from_state: str | None,
    *,
    cause: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None,
) -> None:
    """The audit event of `item`'s change (as it is after it), in the change's transaction;
    published to the tenant's webhook endpoints when the machine renders a snapshot."""
    context = audit_rows.EventContext.current()
    row = event_row(
        machine,
        item,
        from_state,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data=data,
        event_id=ids.new_id("evt"),
        context=context,
    )
    audit.write(connection, row)


def event_row(
    machine: Machine[T],
    item: T,
    from_state: str | None,
    *,
    cause: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None,
    event_id: str,
    context: audit_rows.EventContext,
) -> dict[str, Any]:
    """The row `record` writes, built (pure): what a data-plane phase plans (ADR 0026)."""
    return audit_rows.state_change_row(
        item.tenant_id,
        event_id=event_id,
        context=context,
        object_type=machine.object_type,
        object_id=item.id,
        from_state=None if from_state is None else machine.public(from_state),
        to_state=machine.public(item.status),
        cause=cause,
        actor=actor,
        now_us=now_us,
        data=data,
        snapshot=None if machine.snapshot is None else machine.snapshot(item),
    )


def ask_again(connection: Connection, machine: Machine[T], item: T, *, actor: str, now_us: int) -> bool:
    """A person asks the other system again: the item (waiting on it, or left on a fault by a
    worker round, and held by no worker) is due for the next round now, one more round even
    after its rounds ran out; audited. False when it waits on nothing and has no fault, or a
    worker holds it (that worker is asking)."""
    item_fault = getattr(item, FAULT_CODE, None)
    if machine.public(item.status) not in machine.waiting and item_fault is None:
        return False
    if not store.make_due(
        connection, machine.table, item.tenant_id, item.id, machine.spellings((item.status,)), now_us
    ):
        return False
    audit.record_other(
        connection,
        item.tenant_id,
        kind="note",
        type=f"{machine.object_type}.asked_again",
        object_type=machine.object_type,
        object_id=item.id,
        cause="asked_again",
        actor=actor,
        now_us=now_us,
        data={"status": machine.public(item.status), **({"fault": item_fault} if item_fault else {})},
    )
    return True
