"""A payout's ledger transfers (docs/ledger.md, "Payouts"). Every function runs in the
caller's transaction, next to the status change or adjustment row it belongs to.

Accounts, per tenant and currency:
- the source account (the tenant's, e.g. a seller's balance): the payout is taken from it;
- `payouts.in_transit.CUR` (credit-normal): promised to the bank, not yet paid out;
- `bank.cash.CUR` (debit-normal): the platform's bank account as the bank reports it;
- `payouts.fees.CUR` (debit-normal): fees the bank charged;
- `payouts.losses.CUR` (debit-normal): money paid out that did not come back.

    schedule           hold (pending): source -> in transit, guarded: never below available
    cancel / failed    void the hold (before sent)
    sent               post the hold
    rejected after sent reverse the posted hold: in transit -> source
    settled            in transit -> bank cash
    adjustments        see ADJUSTMENT_LEGS; a bank's fee and its reversal: ledger/fees.py
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection

from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.service import AccountTemplate, EntrySpec, TransferSpec
from paycore.payouts.types import Payout

IN_TRANSIT: Final = chart.PAYOUTS_IN_TRANSIT
BANK_CASH: Final = chart.BANK_CASH
FEES: Final = chart.PAYOUTS_FEES
LOSSES: Final = chart.PAYOUTS_LOSSES
SOURCE: Final = "source"

_NORMAL_BALANCE: Final = {prefix: chart.NORMAL_BALANCE[prefix] for prefix in (IN_TRANSIT, BANK_CASH, FEES, LOSSES)}

# Each adjustment kind that is not a bank's fee (those: ledger.BANK_FEE_KINDS) as (debited,
# credited): what moves, from the platform's point of view.
ADJUSTMENT_LEGS: Final = {
    "chargeback": (LOSSES, BANK_CASH),  # the money that funded the payout was clawed back
    "chargeback_reversal": (BANK_CASH, LOSSES),  # the chargeback was won
    "recovery": (SOURCE, LOSSES),  # taken back from the source account's owner
    "refund": (BANK_CASH, LOSSES),  # the beneficiary sent money back outside the rail
}


def templates(currency: str) -> list[AccountTemplate]:
    """The payout system accounts of `currency`, as `accounts` ensures them (and the data plane's
    first payout of a tenant creates them: `create_plan.py`)."""
    return [
        AccountTemplate(chart.code(prefix, currency), currency, normal, False)
        for prefix, normal in _NORMAL_BALANCE.items()
    ]


def accounts(connection: Connection, tenant_id: str, currency: str, *, now_us: int) -> dict[str, str]:
    """The payout system accounts' ids by code prefix, created where missing."""
    found = ledger.ensure_accounts(connection, tenant_id, templates(currency), now_us=now_us)
    return {prefix: found[chart.code(prefix, currency)].id for prefix in _NORMAL_BALANCE}


def hold(
    connection: Connection,
    tenant_id: str,
    payout_id: str,
    source_id: str,
    amount_minor: int,
    currency: str,
    now_us: int,
) -> str:
    """The pending transfer that reserves the payout's amount on its source at once.
    Raises InsufficientFunds (422) when the source's available balance is short."""
    in_transit = accounts(connection, tenant_id, currency, now_us=now_us)[IN_TRANSIT]
    spec = TransferSpec(
        entries=(EntrySpec(source_id, "debit", amount_minor), EntrySpec(in_transit, "credit", amount_minor)),
        pending=True,
        currency=currency,
        reference_type="payout",
        reference_id=payout_id,
        owner_id=payout_id,
        guard_available=(source_id,),
    )
    return ledger.create_transfer(connection, tenant_id, spec, now_us=now_us).id


def release(connection: Connection, payout: Payout, *, now_us: int) -> None:
    ledger.settle_pending(
        connection, payout.tenant_id, payout.transfer_id, post=False, now_us=now_us, owner_id=payout.id
    )


def commit_hold(connection: Connection, payout: Payout, *, now_us: int) -> None:
    ledger.settle_pending(
        connection, payout.tenant_id, payout.transfer_id, post=True, now_us=now_us, owner_id=payout.id
    )


def give_back(connection: Connection, payout: Payout, *, now_us: int) -> None:
    """A payout rejected after it was sent: the posted hold is reversed to the source."""
    ledger.reverse_transfer(
        connection, payout.tenant_id, payout.transfer_id, now_us=now_us, owner_id=payout.id, metadata={}
    )


def pay_out(connection: Connection, payout: Payout, *, now_us: int) -> str:
    """Settled: the money left the platform's bank account."""
    ids = accounts(connection, payout.tenant_id, payout.currency, now_us=now_us)
    return _move(
        connection, payout, ((ids[IN_TRANSIT], "debit"), (ids[BANK_CASH], "credit")), payout.amount_minor, now_us
    )


def adjustment_transfer(connection: Connection, payout: Payout, kind: str, amount_minor: int, *, now_us: int) -> str:
    ids = {**accounts(connection, payout.tenant_id, payout.currency, now_us=now_us), SOURCE: payout.source_account_id}
    if kind == "return":
        return _return(connection, payout, ids, amount_minor, now_us)
    if kind in ledger.BANK_FEE_KINDS:
        fee_accounts = ledger.BankFeeAccounts(fees=ids[FEES], bank_cash=ids[BANK_CASH])
        spec = ledger.bank_fee_spec(kind, fee_accounts, payout.currency, amount_minor, payout.id)
        return ledger.create_transfer(connection, payout.tenant_id, spec, now_us=now_us).id
    debited, credited = ADJUSTMENT_LEGS[kind]
    guard = (payout.source_account_id,) if debited == SOURCE else ()
    legs = ((ids[debited], "debit"), (ids[credited], "credit"))
    return _move(connection, payout, legs, amount_minor, now_us, reference_type="adjustment", guard=guard)


def _return(connection: Connection, payout: Payout, ids: dict[str, str], received_minor: int, now_us: int) -> str:
    """A return gives the source back the whole amount; what the bank sent back short of it
    (charges deducted on the way) is a loss."""
    short_minor = payout.amount_minor - received_minor
    entries = [EntrySpec(ids[BANK_CASH], "debit", received_minor)]
    if short_minor > 0:
        entries.append(EntrySpec(ids[LOSSES], "debit", short_minor))
    entries.append(EntrySpec(ids[SOURCE], "credit", payout.amount_minor))
    spec = TransferSpec(
        entries=tuple(entries),
        currency=payout.currency,
        reference_type="adjustment",
        reference_id=payout.id,
        owner_id=payout.id,
    )
    return ledger.create_transfer(connection, payout.tenant_id, spec, now_us=now_us).id


def _move(
    connection: Connection,
    payout: Payout,
    legs: tuple[tuple[str, str], tuple[str, str]],
    amount_minor: int,
    now_us: int,
    *,
    reference_type: str = "payout",
    guard: tuple[str, ...] = (),
) -> str:
    spec = TransferSpec(
        entries=tuple(EntrySpec(account_id, direction, amount_minor) for account_id, direction in legs),
        currency=payout.currency,
        reference_type=reference_type,
        reference_id=payout.id,
        owner_id=payout.id,
        guard_available=guard,
    )
    return ledger.create_transfer(connection, payout.tenant_id, spec, now_us=now_us).id
