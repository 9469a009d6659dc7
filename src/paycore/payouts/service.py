"""Scheduling and canceling payouts (SPEC §11). Every function runs in the caller's
transaction; the HTTP layer wraps them with the request's idempotency key.

Scheduling reserves the amount on the source account at once (a pending ledger transfer
whose debit may not take the source below its available balance), so one balance cannot be
paid out twice, whichever API process the requests reach: the check and the write happen
under the account's row lock (SQLite: its one writer).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection
from typing import Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.kit import ids
from paycore.kit.clock import day_start_us, utc_day
from paycore.kit.errors import InvalidStartingAfter
from paycore.ledger import service as ledger
from paycore.ledger.errors import AccountNotFound, CurrencyMismatch
from paycore.lifecycle import recording
from paycore.lifecycle.machine import Machine
from paycore.payouts import create_plan, lifecycle, money, repository, states
from paycore.payouts.errors import PayoutNotCancelable
from paycore.payouts.types import Adjustment, NewPayout, Payout, adjustment_from_row, payout_from_row

HISTORY_LENGTH_MAX = 100


# The payout's lifecycle, the one home of reading payouts by id and by status (`load`, `find`,
# `find_many`, `moved_between`, `search`, `summary`, `working_since_us`, `in_doubt_summary`):
# other domains and the console call `payouts.MACHINE.find(...)`, as every status change goes
# through it.
MACHINE: Final[Machine[Payout]] = lifecycle.MACHINE


def new_payout_id() -> str:
    return ids.new_id("po")


def schedule(
    connection: Connection,
    tenant_id: str,
    new: NewPayout,
    *,
    now_us: int,
    actor: str,
    new_id: Callable[[], str] = new_payout_id,
) -> Payout:
    """Validate, hold the amount on the source account, store the payout in `scheduled`.
    Refusals: 400s (InvalidRequest subclasses), AccountNotFound, CurrencyMismatch and
    InsufficientFunds (422, nothing stored)."""
    beneficiary, execute_on = create_plan.check_request(new, now_us)
    try:
        source = ledger.get_account(connection, tenant_id, new.source_account_id)
    except AccountNotFound as error:
        raise AccountNotFound("no such source account", param="source_account") from error
    if source.currency != new.currency:
        raise CurrencyMismatch(
            f"the source account holds {source.currency}, the payout is in {new.currency}", param="currency"
        )
    payout_id = new_id()
    transfer_id = money.hold(connection, tenant_id, payout_id, source.id, new.amount_minor, new.currency, now_us)
    payout = create_plan.new_payout(tenant_id, payout_id, new, beneficiary, execute_on, transfer_id, now_us)
    recording.create(
        connection,
        lifecycle.MACHINE,
        payout,
        cause=create_plan.CAUSE,
        actor=actor,
        data=create_plan.birth_data(payout),
    )
    return payout  # what was inserted: no re-read


def cancel(connection: Connection, tenant_id: str, payout_id: str, *, now_us: int, actor: str) -> Payout:
    """scheduled|queued -> canceled, the hold voided. One compare-and-set on the status decides
    a race with a worker's claim; canceling a canceled payout answers it unchanged."""
    payout = lifecycle.MACHINE.load(connection, tenant_id, payout_id, for_update=True)
    if payout.status == states.CANCELED:
        return payout
    if payout.status in states.CANCELABLE:
        moved = lifecycle.MACHINE.move(
            connection, payout, states.CANCELED, cause=lifecycle.CANCEL_CAUSE, actor=actor, now_us=now_us
        )
        if moved.changed or moved.item.status == states.CANCELED:
            return moved.item
        payout = moved.item  # a worker claimed it between our read and our update
    raise PayoutNotCancelable(
        f"the payout is {states.public(payout.status)}: only a scheduled or queued payout can be canceled",
        status=states.public(payout.status),
    )


def page(
    connection: Connection, tenant_id: str, *, status: str | None, starting_after: str | None, limit: int
) -> list[Payout]:
    """Oldest first. `starting_after` is a payout of the tenant (whatever its status now);
    anything else is refused."""
    if starting_after is not None and not repository.exists(connection, tenant_id, starting_after):
        raise InvalidStartingAfter("starting_after is not a payout of this tenant", param="starting_after")
    rows = repository.page(connection, tenant_id, status=status, starting_after=starting_after, limit=limit)
    return [payout_from_row(row._mapping) for row in rows]


def history(connection: Connection, payout: Payout) -> list[audit.Event]:
    events = audit.events_of(connection, payout.tenant_id, payout.id, limit=HISTORY_LENGTH_MAX)
    return [event for event in events if event.kind == "state_change"]


def adjustments(connection: Connection, payout: Payout) -> list[Adjustment]:
    return [adjustment_from_row(row) for row in repository.adjustments_of(connection, payout.tenant_id, payout.id)]


def bank_fees_of(connection: Connection, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str, str], int]:
    """The bank's fees booked on these (tenant_id, payout_id), by (tenant, payout, `fee` or
    `return_fee`), in one statement; a payout with none is left out."""
    return repository.bank_fees_of(connection, keys)


# Evidence of any kind (a person's confirmed manual resolution too), applied through the
# payout's lifecycle, its ledger effects and the bank's fee and return.
apply_evidence: Final = lifecycle.apply_evidence


def public_status(stored: str) -> str:
    """The public name of a stored payout status, whichever spelling stored it."""
    return states.public(states.normalize(stored))


def oldest_due_to_queue_us(connection: Connection, *, now_us: int) -> int | None:
    """When the oldest scheduled payout whose day has come fell due: the start of its day (UTC).
    The queueing job's lag."""
    day = repository.oldest_execute_on(
        connection, status=states.SCHEDULED, execute_on_max=utc_day(now_us).isoformat(), now_us=now_us
    )
    return None if day is None else day_start_us(dt.date.fromisoformat(day))


def count_by_status(connection: Connection) -> dict[str, int]:
    return repository.count_by_status(connection)
