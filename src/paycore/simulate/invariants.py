"""What must hold after every scenario (SPEC §8): the two sides agree on every payment's
(an authorization's captured amount and cancellation reason too), refund's and payout's final
state and amount, and nothing is left waiting on the processor; the processor never gave back
more than a payment; no request moved money twice (the processor keeps one row per request id)
and no authorization was captured or canceled twice; no reconciliation break is left open; the
ledger verifies, the books against every flow's state included. Read from both sides' own databases."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Row, create_engine, select, text

from paycore.invariants import service as invariants
from paycore.ledger.verify import verify
from paycore.payments import states as payment_states
from paycore.payments.lifecycle import state_proved
from paycore.payments.models import payments
from paycore.payouts import states as payout_states
from paycore.payouts.models import payouts
from paycore.reconciliation.models import reconciliation_breaks
from paycore.refunds.models import refunds
from paycore.simulate.world import World

SETTLED = {"succeeded", "failed"}
WAITING = {"processing", "in_doubt"}
# A payout's public status in paycore -> what the bank may say of it (None: it has no record).
BANK_STATUS_OF_PAYOUT: dict[str, set[str | None]] = {
    "scheduled": {None},
    "queued": {None},
    "canceled": {None},
    "failed": {None, "rejected"},
    "sent": {"accepted"},
    "settled": {"settled"},
    "returned": {"returned"},
}
PROCESSOR_TABLES = ("sandbox_charges", "sandbox_charge_actions", "sandbox_refunds", "sandbox_bank_payouts")
# An authorization's status at the processor -> the `cancellation_reason` it proves.
REASON_OF_CLOSE = {"canceled": payment_states.REQUESTED, "expired": payment_states.EXPIRED}


def check(world: World) -> list[str]:
    """Every broken invariant, as a sentence (empty when all hold)."""
    with world.database.read() as connection:
        ours = list(connection.execute(select(refunds)))
        paid = {row.id: row for row in connection.execute(select(payments))}
        paid_out = list(connection.execute(select(payouts)))
        breaks = list(connection.execute(select(reconciliation_breaks).where(reconciliation_breaks.c.status == "open")))
        report = verify(connection)
        report.problems.extend(invariants.verify_books(connection))
    theirs = _processor_rows(world)
    broken = [
        *_refunds_agree(ours, theirs["sandbox_refunds"]),
        *_refunds_within_payments(ours, paid, theirs["sandbox_refunds"]),
        *_payments_agree(paid.values(), theirs["sandbox_charges"]),
        *_charges_closed_once(theirs["sandbox_charges"], theirs["sandbox_charge_actions"]),
        *_payouts_agree(paid_out, theirs["sandbox_bank_payouts"]),
        *(f"break {row.id} ({row.type}) left open: {row.detail}" for row in breaks),
    ]
    if not report.ok:
        broken.append("paycore ledger verify failed: " + "; ".join(report.problems[:3]))
    return broken


def _refunds_agree(ours: list[Row[Any]], theirs: dict[str, dict[str, Any]]) -> Iterable[str]:
    for refund in ours:
        at_processor = theirs.get(refund.processor_request_id)
        if refund.status in SETTLED and at_processor is not None:
            yield from _disagreement(refund.id, (refund.status, refund.amount_minor), at_processor)
        elif refund.status == "succeeded" and at_processor is None:
            yield f"{refund.id}: succeeded in paycore but unknown to the processor"
        elif refund.status in WAITING:
            yield f"{refund.id}: still {refund.status} at the end"
        elif refund.status in ("pending", "requires_approval", "canceled") and at_processor is not None:
            yield f"{refund.id}: {refund.status} in paycore but the processor has it"


def _refunds_within_payments(
    ours: list[Row[Any]], paid: dict[str, Row[Any]], theirs: dict[str, dict[str, Any]]
) -> Iterable[str]:
    given_back: dict[str, int] = defaultdict(int)
    for row in theirs.values():
        if row["status"] == "succeeded":
            given_back[str(row["charge_request_id"])] += int(row["amount_minor"])
    for payment_id, amount in given_back.items():
        payment = paid.get(payment_id)
        if payment is None or amount > payment.amount_minor:
            yield f"{payment_id}: the processor gave back {amount}, more than was paid"
    held: dict[str, int] = defaultdict(int)
    for refund in ours:
        if refund.status not in ("failed", "canceled"):
            held[refund.payment_id] += refund.amount_minor
    for payment in paid.values():
        if held[payment.id] != payment.refunded_minor or payment.refunded_minor > payment.amount_minor:
            yield f"{payment.id}: refunds hold {held[payment.id]}, the payment records {payment.refunded_minor}"


def _payments_agree(paid: Iterable[Row[Any]], theirs: dict[str, dict[str, Any]]) -> Iterable[str]:
    for payment in paid:
        at_processor = theirs.get(payment.processor_request_id)
        if payment.status in WAITING:
            yield f"{payment.id}: still {payment.status} at the end"
        elif at_processor is not None and payment.capture_method == "manual":
            yield from _authorization_disagreement(payment, at_processor)
        elif at_processor is not None:
            yield from _disagreement(payment.id, (payment.status, payment.amount_minor), at_processor)
        elif payment.status == "succeeded":
            yield f"{payment.id}: succeeded in paycore but unknown to the processor"


def _authorization_disagreement(payment: Row[Any], at_processor: dict[str, Any]) -> Iterable[str]:
    """A manual payment against its authorization: the status the processor's proves, what was
    captured, and why it was canceled (requested, or expired on the processor's word)."""
    said = str(at_processor["status"])
    ours = (payment.status, payment.amount_captured_minor or 0, payment.cancellation_reason)
    theirs = (state_proved(said), int(at_processor["captured_minor"]), REASON_OF_CLOSE.get(said))
    if ours != theirs:
        yield f"{payment.id}: paycore says {ours}, the processor's authorization ({said}) proves {theirs}"


def _charges_closed_once(charges: dict[str, dict[str, Any]], actions: dict[str, dict[str, Any]]) -> Iterable[str]:
    """No authorization was captured or canceled twice: one action at most per charge, and a
    captured charge's one action is the capture of what it took."""
    by_charge: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for action in actions.values():
        by_charge[str(action["charge_request_id"])].append(action)
    for charge_id, done in by_charge.items():
        charge = charges[charge_id]
        kinds = sorted(str(action["kind"]) for action in done)
        if len(done) > 1:
            yield f"{charge_id}: closed by {len(done)} requests at the processor ({', '.join(kinds)})"
        elif charge["status"] == "captured" and (kinds, done[0]["amount_minor"]) != (
            ["capture"],
            charge["captured_minor"],
        ):
            asked = f"{kinds[0]} {done[0]['amount_minor']}"
            yield f"{charge_id}: captured {charge['captured_minor']}, but its one request was a {asked}"


def _payouts_agree(paid_out: list[Row[Any]], theirs: dict[str, dict[str, Any]]) -> Iterable[str]:
    for payout in paid_out:
        status = payout_states.public(payout_states.normalize(payout.status))
        at_bank = theirs.get(payout.id)  # a payout's request id at the bank is its id
        if status in WAITING:
            yield f"{payout.id}: still {status} at the end"
            continue
        said = None if at_bank is None else str(at_bank["status"])
        if said not in BANK_STATUS_OF_PAYOUT[status]:
            yield f"{payout.id}: paycore says {status}, the bank says {said or 'nothing'}"
        elif at_bank is not None and int(at_bank["amount_minor"]) != payout.amount_minor:
            yield f"{payout.id}: paycore paid out {payout.amount_minor}, the bank {at_bank['amount_minor']}"


def _disagreement(object_id: str, ours: tuple[str, int], at_processor: dict[str, Any]) -> Iterable[str]:
    theirs = (str(at_processor["status"]), int(at_processor["amount_minor"]))
    if theirs != ours:
        yield (f"{object_id}: paycore says {ours[0]} {ours[1]}, the processor says {theirs[0]} {theirs[1]}")


def _processor_rows(world: World) -> dict[str, dict[str, dict[str, Any]]]:
    """The processor's charges, refunds and bank payouts, each by request id (its primary key:
    one row per request, never two)."""
    engine = create_engine(f"sqlite:///{world.workdir / 'sandbox.db'}")
    try:
        with engine.connect() as connection:
            return {
                table: {
                    str(row["request_id"]): dict(row)
                    for row in connection.execute(text(f"SELECT * FROM {table}")).mappings()
                }
                for table in PROCESSOR_TABLES
            }
    finally:
        engine.dispose()
