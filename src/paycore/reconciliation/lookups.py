"""What paycore holds for the lines of a chunk that are judged one by one (`chunks`): the
objects they name, one statement per kind (or one object, locked, before it is moved), and the
fees booked for them (two statements per chunk), as `matching.Known`, what `matching.judge`
compares a line with. A dispute line's dispute is found by the processor's dispute id
(`disputes.service.find`, one statement per dispute line: such lines are few).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy import Connection

from paycore.disputes import service as disputes
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.reconciliation import repository
from paycore.reconciliation.matching import KIND_OF_LINE, Kind, Known, reference
from paycore.reconciliation.report import Line
from paycore.refunds import service as refunds

FEE_LINE_TYPES: Final = frozenset({"charge", "refund"})  # a payout's bank fee is booked by its settlement
_LINE_OF_FEE: Final = {"payment": "charge", "refund": "refund"}
_PAYOUT_LINE_TYPES: Final = frozenset({"payout", "payout_return"})


def key_of(line: Line) -> tuple[Kind, str, str]:
    """The key of the line's object in what `find_all` returns: (kind, tenant, id in its kind)."""
    return KIND_OF_LINE[line.type], line.merchant_id, reference(line)


def find_all(connection: Connection, lines: list[Line]) -> dict[tuple[Kind, str, str], Any]:
    """The objects the lines name, by (kind, tenant, id): one statement per kind."""
    keys: dict[Kind, set[tuple[str, str]]] = defaultdict(set)
    for line in lines:
        kind, tenant_id, object_id = key_of(line)
        keys[kind].add((tenant_id, object_id))
    finders: dict[Kind, Callable[[Connection, set[tuple[str, str]]], dict[tuple[str, str], Any]]] = {
        "payment": payments.MACHINE.find_many,
        "refund": refunds.MACHINE.find_many,
        "payout": payouts.MACHINE.find_many,
        "dispute": _disputes,
    }
    found: dict[tuple[Kind, str, str], Any] = {}
    for kind, wanted in keys.items():
        for (tenant_id, object_id), item in finders[kind](connection, wanted).items():
            found[(kind, tenant_id, object_id)] = item
    return found


def find_one(connection: Connection, line: Line) -> Any:
    """The object the line names, locked for this transaction (before it is moved)."""
    kind = KIND_OF_LINE[line.type]
    assert kind != "dispute", "a report line proves nothing of a dispute: it is never moved from here"
    finder = {"payment": payments.MACHINE.find, "refund": refunds.MACHINE.find, "payout": payouts.MACHINE.find}[kind]
    return finder(connection, line.merchant_id, line.request_id, for_update=True)


def fees_booked(connection: Connection, lines: list[Line]) -> dict[tuple[str, str, str], int]:
    """The fees paycore booked for the lines' objects, by (tenant, line type, request id): the
    processor's fee of a charge or refund (booked by reconciliation), the bank's fee of a
    payout's settlement or return (booked by that transition). Two statements per chunk."""
    booked = repository.fees_of(connection, [_fee_key(line) for line in lines if line.type in FEE_LINE_TYPES])
    fees = {(tenant, _LINE_OF_FEE[kind], object_id): fee for (tenant, kind, object_id), fee in booked.items()}
    payout_keys = {(line.merchant_id, line.request_id) for line in lines if line.type in _PAYOUT_LINE_TYPES}
    for (tenant, payout_id, kind), fee in payouts.bank_fees_of(connection, payout_keys).items():
        fees[(tenant, "payout" if kind == "fee" else "payout_return", payout_id)] = fee
    return fees


def known_of(item: Any, line: Line, fees: dict[tuple[str, str, str], int]) -> Known:
    """What paycore holds for the line's object. A payout paycore holds as settled (or returned,
    for a return line) had its bank fee booked by that transition: none booked is 0 then."""
    kind = KIND_OF_LINE[line.type]
    if kind == "dispute":
        return _dispute(item, line)
    status = payouts.public_status(item.status) if kind == "payout" else item.status
    fee = fees.get((line.merchant_id, line.type, line.request_id))
    if fee is None and line.type == "payout" and status in ("settled", "returned"):
        fee = 0
    if fee is None and line.type == "payout_return" and status == "returned":
        fee = 0
    if kind == "payment" and item.is_manual:
        return _authorization(item, fee)
    return Known(kind, item.id, status, item.amount_minor, item.currency, fee)


def _authorization(payment: Any, fee: int | None) -> Known:
    """A manual payment as a capture line is compared with (SPEC §6.1): what was captured, or,
    while a capture's outcome is not known, what it asked for; no capture sent: the amount
    authorized (a capture line contradicts it whatever its amount)."""
    if payment.status == "succeeded":
        # A person's confirmed word (manual resolution) records no amount: what was asked for, or
        # all of it (what the ledger posted then: `payments.lifecycle._effect`).
        captured = payment.amount_captured_minor or payment.capture_requested_minor
        amount_minor, sent = captured or payment.amount_minor, True
    elif payment.operation == "capture" and payment.status in ("processing", "in_doubt"):
        amount_minor, sent = payment.capture_requested_minor, True
    else:
        amount_minor, sent = payment.amount_minor, False
    assert amount_minor is not None and amount_minor > 0, payment
    return Known(
        "payment", payment.id, payment.status, amount_minor, payment.currency, fee, manual=True, capture_sent=sent
    )


def _disputes(connection: Connection, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """The disputes named, by (tenant, the processor's dispute id): one statement each."""
    found = {(tenant, dispute_id): disputes.find(connection, tenant, dispute_id) for tenant, dispute_id in wanted}
    return {key: dispute for key, dispute in found.items() if dispute is not None}


def _dispute(dispute: Any, line: Line) -> Known:
    """A dispute as its line is compared with: a withdrawal with the disputed amount, a fee line
    with the fee withdrawn with it, once paycore withdrew them (the chargeback's one transfer of
    `withdrawn_minor`, amount plus fee); a reinstatement
    with what paycore reinstated (the amount, once won). No fee of the processor's is booked."""
    if line.type == "dispute_reinstatement":
        moved = dispute.reinstated_minor > 0
        amount_minor = dispute.reinstated_minor if moved else dispute.amount_minor
    else:
        moved = dispute.withdrawn_minor > 0
        fee_minor = dispute.withdrawn_minor - dispute.amount_minor if moved else dispute.fee_minor
        amount_minor = fee_minor if line.type == "dispute_fee" else dispute.amount_minor
    return Known("dispute", dispute.id, dispute.status, amount_minor, dispute.currency, 0, moved=moved)


def _fee_key(line: Line) -> repository.FeeKey:
    return (line.merchant_id, KIND_OF_LINE[line.type], line.request_id)
