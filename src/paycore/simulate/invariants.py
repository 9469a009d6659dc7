"""What must hold after every scenario (SPEC §8): the two sides agree on every refund's final
state and amount; the processor never gave back more than a payment; no request moved money
twice; the ledger verifies. Read from both sides' own databases."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import create_engine, select, text

from paycore.ledger.verify import verify
from paycore.payments.models import payments
from paycore.refunds.models import refunds
from paycore.simulate.world import World

SETTLED = {"succeeded", "failed"}


def check(world: World) -> list[str]:
    """Every broken invariant, as a sentence (empty when all hold)."""
    broken: list[str] = []
    with world.database.read() as connection:
        ours = list(connection.execute(select(refunds)))
        paid = {row.id: row for row in connection.execute(select(payments))}
        report = verify(connection)
    theirs = _processor_refunds(world)
    for refund in ours:
        at_processor = theirs.get(refund.processor_request_id)
        if refund.status in SETTLED and at_processor is not None:
            if (at_processor["status"], at_processor["amount_minor"]) != (refund.status, refund.amount_minor):
                broken.append(
                    f"{refund.id}: paycore says {refund.status} {refund.amount_minor}, the processor says "
                    f"{at_processor['status']} {at_processor['amount_minor']}"
                )
        elif refund.status == "succeeded" and at_processor is None:
            broken.append(f"{refund.id}: succeeded in paycore but unknown to the processor")
        elif refund.status in ("in_doubt", "processing"):
            broken.append(f"{refund.id}: still {refund.status} at the end")
        elif refund.status in ("pending", "requires_approval", "canceled") and at_processor is not None:
            broken.append(f"{refund.id}: {refund.status} in paycore but the processor has it")
    given_back: dict[str, int] = defaultdict(int)
    for row in theirs.values():
        if row["status"] == "succeeded":
            given_back[str(row["charge_request_id"])] += int(row["amount_minor"])
    for payment_id, amount in given_back.items():
        payment = paid.get(payment_id)
        if payment is None or amount > payment.amount_minor:
            broken.append(f"{payment_id}: the processor gave back {amount}, more than was paid")
    held: dict[str, int] = defaultdict(int)
    for refund in ours:
        if refund.status not in ("failed", "canceled"):
            held[refund.payment_id] += refund.amount_minor
    for payment in paid.values():
        if held[payment.id] != payment.refunded_minor or payment.refunded_minor > payment.amount_minor:
            broken.append(
                f"{payment.id}: refunds hold {held[payment.id]}, the payment records {payment.refunded_minor}"
            )
    if not report.ok:
        broken.append("paycore ledger verify failed: " + "; ".join(report.problems[:3]))
    return broken


def _processor_refunds(world: World) -> dict[str, dict[str, Any]]:
    """The processor's refunds by request id (its primary key: one per request, never two)."""
    engine = create_engine(f"sqlite:///{world.workdir / 'sandbox.db'}")
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT * FROM sandbox_refunds")).mappings().all()
    finally:
        engine.dispose()
    return {str(row["request_id"]): dict(row) for row in rows}
