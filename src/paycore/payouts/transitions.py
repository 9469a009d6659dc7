"""The only place a payout's status changes.

`move` checks the transition table, changes the status by compare-and-set, and in the same
transaction writes the ledger effect of that transition and its audit event. Whoever comes
second (a cancel racing a worker's claim, a webhook racing the resolver) finds the status
changed and changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.engine import after_commit
from paycore.payouts import money, repository, states
from paycore.payouts.errors import PayoutNotFound
from paycore.payouts.types import Payout, payout_from_row

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Moved:
    payout: Payout  # as it is now
    changed: bool


def find(connection: Connection, tenant_id: str, payout_id: str, *, for_update: bool = False) -> Payout | None:
    row = repository.get(connection, tenant_id, payout_id, for_update=for_update)
    return None if row is None else payout_from_row(row)


def load(connection: Connection, tenant_id: str, payout_id: str, *, for_update: bool = False) -> Payout:
    payout = find(connection, tenant_id, payout_id, for_update=for_update)
    if payout is None:
        raise PayoutNotFound("no such payout", param="id")
    return payout


def move(
    connection: Connection,
    payout: Payout,
    to_state: str,
    *,
    cause: str,
    actor: str,
    now_us: int,
    values: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
) -> Moved:
    """Move `payout` (as loaded in this transaction) to `to_state` if the table allows it and
    nobody moved it first. `values` are further columns changed with the status."""
    if not states.allowed(payout.status, to_state):
        return Moved(payout, False)
    # `now_us` may predate a lock wait: never record a change as earlier than the one it follows.
    now_us = max(now_us, payout.updated_at_us + 1)
    changes: dict[str, Any] = {"status": to_state, "updated_at_us": now_us, **(values or {})}
    changes.update(_columns_of(to_state, now_us))
    if not repository.change_status(connection, payout.tenant_id, payout.id, (payout.status,), changes):
        return Moved(load(connection, payout.tenant_id, payout.id), False)
    _ledger_effect(connection, payout, to_state, now_us)
    audit.record_state_change(
        connection,
        payout.tenant_id,
        object_type="payout",
        object_id=payout.id,
        from_state=states.public(payout.status),
        to_state=states.public(to_state),
        cause=cause,
        actor=actor,
        now_us=now_us,
        data=data,
    )
    if to_state == states.IN_DOUBT:
        # Written once the change has committed: never for a change rolled back, once if retried.
        after_commit(
            partial(
                log.warning,
                "payout %s is in doubt: its outcome at the bank is not known",
                payout.id,
                extra={
                    "event": "in_doubt",
                    "kind": "payout",
                    "payout_id": payout.id,
                    "tenant_id": payout.tenant_id,
                    "from_state": states.public(payout.status),
                    "cause": cause,
                },
            )
        )
    return Moved(dataclasses.replace(payout, **changes), True)  # what the UPDATE wrote: no re-read


def _columns_of(to_state: str, now_us: int) -> dict[str, Any]:
    if to_state == states.IN_DOUBT:
        return {"in_doubt_since_us": now_us}
    if to_state == states.SENT:
        return {"sent_at_us": now_us, "in_doubt_since_us": None}
    if to_state == states.SETTLED:  # returns come by webhook: nothing left to poll for
        return {"settled_at_us": now_us, "next_attempt_at_us": None, "claimed_by": None, "claimed_until_us": None}
    if to_state == states.RETURNED:
        return {"returned_at_us": now_us}
    if to_state in states.TERMINAL:
        return {"next_attempt_at_us": None, "claimed_by": None, "claimed_until_us": None, "in_doubt_since_us": None}
    return {}


def _ledger_effect(connection: Connection, payout: Payout, to_state: str, now_us: int) -> None:
    if to_state in (states.CANCELED, states.FAILED) and payout.status in states.HELD:
        money.release(connection, payout, now_us=now_us)
    elif to_state == states.FAILED:  # rejected after the bank had accepted it
        money.give_back(connection, payout, now_us=now_us)
    elif to_state == states.SENT:
        money.commit_hold(connection, payout, now_us=now_us)
    elif to_state == states.SETTLED:
        money.pay_out(connection, payout, now_us=now_us)
    # returned: the return adjustment, written with it (adjustments.record_bank_return)
