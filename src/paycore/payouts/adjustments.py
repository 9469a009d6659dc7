"""Adjustments (SPEC §11): money that moved because of a payout after it was sent. Each is a
row linked to the payout and a ledger transfer, written in one transaction, deduplicated on
(payout, dedupe_key) so that a redelivered webhook or a retried request adds nothing.

The bank reports fees (at settlement), returns and return fees (`lifecycle.record_bank_fee`,
`lifecycle.record_bank_return`: they are the bank's evidence). People record the rest
through the API: chargebacks of the payout's funding and their reversals, recoveries from
the source account's owner, fee reversals, refunds from the beneficiary. Each API kind is
bounded by what it corrects (docs/losses.md), checked under the payout's row lock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.kit import ids
from paycore.kit.clock import utc_day
from paycore.kit.errors import InvalidAmount, InvalidRequest
from paycore.kit.money import is_amount_minor
from paycore.payouts import money, repository, states
from paycore.payouts.errors import AdjustmentNotAllowed, InvalidEffectiveOn, PayoutNotFound
from paycore.payouts.types import Adjustment, Payout, adjustment_from_row, payout_from_row

API_KINDS: Final = ("chargeback", "chargeback_reversal", "recovery", "fee_reversal", "refund")
# Money has left for the beneficiary in these: only then can it be charged back or recovered.
_PAID_STATES: Final = frozenset({states.SENT, states.SETTLED, states.RETURNED})


@dataclass(frozen=True)
class NewAdjustment:
    kind: str
    amount_minor: int
    effective_on: str | None = None  # YYYY-MM-DD; today (UTC) when absent
    code: str | None = None
    note: str | None = None


def record(
    connection: Connection,
    payout: Payout,
    new: NewAdjustment,
    *,
    source: str,
    dedupe_key: str,
    actor: str,
    now_us: int,
) -> tuple[Adjustment, bool]:
    """Write the adjustment and its ledger transfer unless one with this key exists (then it
    is returned unchanged). Returns (adjustment, created)."""
    found = repository.adjustment_by_key(connection, payout.tenant_id, payout.id, dedupe_key)
    if found is not None:
        return adjustment_from_row(found), False
    adjustment_id = ids.new_id("adj")
    transfer_id = money.adjustment_transfer(connection, payout, new.kind, new.amount_minor, now_us=now_us)
    values: dict[str, Any] = {
        "tenant_id": payout.tenant_id,
        "id": adjustment_id,
        "payout_id": payout.id,
        "kind": new.kind,
        "amount_minor": new.amount_minor,
        "currency": payout.currency,
        "code": new.code,
        "effective_on": new.effective_on or utc_day(now_us).isoformat(),
        "source": source,
        "dedupe_key": dedupe_key,
        "transfer_id": transfer_id,
        "note": new.note,
        "created_at_us": now_us,
    }
    inserted = repository.add_adjustment(connection, values)
    assert inserted, "the payout's row lock (or SQLite's writer) serializes adjustments of one payout"
    audit.record_other(
        connection,
        payout.tenant_id,
        kind="adjustment",
        type=f"payout.adjustment.{new.kind}",
        object_type="payout",
        object_id=payout.id,
        cause=source,
        actor=actor,
        now_us=now_us,
        data={"adjustment_id": adjustment_id, "amount_minor": new.amount_minor, "code": new.code},
    )
    return Adjustment(**values), True


def record_from_api(
    connection: Connection, tenant_id: str, payout_id: str, new: NewAdjustment, *, key: str, actor: str, now_us: int
) -> tuple[Adjustment, bool]:
    """A person's adjustment (one of API_KINDS), bounded by what it corrects."""
    if new.kind not in API_KINDS:
        raise InvalidRequest(f"kind must be one of {', '.join(API_KINDS)}", param="kind")
    if not is_amount_minor(new.amount_minor):
        raise InvalidAmount("amount_minor must be a positive integer up to 2^53 - 1", param="amount_minor")
    _check_effective_on(new.effective_on, today=utc_day(now_us))
    row = repository.get(connection, tenant_id, payout_id, for_update=True)
    if row is None:
        raise PayoutNotFound("no such payout", param="id")
    payout = payout_from_row(row._mapping)
    if payout.status not in _PAID_STATES:
        raise AdjustmentNotAllowed(
            f"the payout is {states.public(payout.status)}: no money has left for the beneficiary",
            status=states.public(payout.status),
        )
    room = _room(connection, payout, new.kind)
    if new.amount_minor > room:
        raise AdjustmentNotAllowed(
            f"a {new.kind} of this payout can be at most {room} minor units now",
            param="amount_minor",
            status=states.public(payout.status),
        )
    return record(connection, payout, new, source="api", dedupe_key=f"key:{key}", actor=actor, now_us=now_us)


def _check_effective_on(raw: str | None, *, today: dt.date) -> None:
    """A real day (YYYY-MM-DD), not after today (UTC): the day the money moved."""
    if raw is None:
        return
    try:
        day = dt.date.fromisoformat(raw)
    except ValueError as error:
        raise InvalidEffectiveOn("effective_on must be a date YYYY-MM-DD", param="effective_on") from error
    if len(raw) != 10:
        raise InvalidEffectiveOn("effective_on must be a date YYYY-MM-DD", param="effective_on")
    if day > today:
        raise InvalidEffectiveOn(f"effective_on is after today ({today.isoformat()} UTC)", param="effective_on")


def _room(connection: Connection, payout: Payout, kind: str) -> int:
    """How much of `kind` still fits: a reversal never exceeds what it reverses."""
    totals = repository.adjustment_totals(connection, payout.tenant_id, payout.id)

    def total(*kinds: str) -> int:
        return sum(totals.get(k, 0) for k in kinds)

    charged_back = total("chargeback") - total("chargeback_reversal")
    if kind == "chargeback":
        return payout.amount_minor - charged_back
    if kind == "chargeback_reversal":
        return charged_back
    if kind == "fee_reversal":
        return total("fee", "return_fee") - total("fee_reversal")
    short_minor = payout.amount_minor - totals["return"] if "return" in totals else 0
    return charged_back + short_minor - total("recovery", "refund")  # recovery, refund
