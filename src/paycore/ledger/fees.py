"""The processor's fees on the ledger (docs/ledger.md, "Processor fees"; ADR 0014).

A processor collects a charge's gross amount and settles it less its fee. paycore booked the
gross when the payment succeeded (debit `processor.clearing.CUR`, credit the destination
account: the processor owes the tenant the gross). The fee is money the processor kept, so it
is booked as one transfer of two entries in the tenant's ledger:

    debit  processor.fees.CUR       fee_minor   what the processor's fees cost (an expense)
    credit processor.clearing.CUR   fee_minor   what the processor owes drops by as much

the same shape as a bank's fee on a payout (debit `payouts.fees`, credit `bank.cash`). The
merchant's balance is not touched: whether a tenant passes the fee on is the tenant's business
(a transfer of its own), and a balance with no_overdraft may have been paid out already, which
would turn "booked exactly once" into "refused".

**Exactly once, by the database.** The transfer carries the fee's key (the reconciliation
uses `settlement-fee:<processor_id>`) in `ledger_transfers.idempotency_key`, unique per tenant.
It is inserted with INSERT ... ON CONFLICT DO NOTHING before any account is touched: of two
transactions in any processes booking one key, one inserts it; on PostgreSQL the other waits
for that transaction's outcome and then books nothing (it committed) or books the fee (it
rolled back); on SQLite the single writer orders them. No in-process state is involved.

**A chunk at a time.** The reconciliation books a chunk's fees (up to FEES_PER_CALL_MAX) in
one call: their transfers go in one insert per 500, each account's totals are updated once
(its row lock, which every payment's success also takes on `processor.clearing`, taken once),
and their entries in one insert per 64: about 40 statements for 1,000 fees, 0.2-0.5 s on
PostgreSQL on this project's machine. One fee at a time was five statements each, 2.4 s.

**A bank's fee on a payout** (`bank_fee_spec`) is booked here too, the same shape: debit
`payouts.fees.CUR`, credit `bank.cash.CUR` (a fee, or a return's fee), or the other way round
for a fee the bank gave back. The payout's adjustment row (payouts/adjustments.py) is what makes
it happen once; its transfer is written by `ledger.service.create_transfer` in the same
transaction.

Every function runs in the caller's transaction and never commits (as the rest of the ledger).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection

from paycore.db.metadata import ID_LENGTH
from paycore.kit import ids
from paycore.kit.errors import InvalidAmount, InvalidRequest, UnsupportedCurrency
from paycore.kit.money import is_amount_minor, is_known_currency
from paycore.ledger import chart, fees_repository
from paycore.ledger.accounts import ensure_accounts
from paycore.ledger.errors import FeeKeyTaken
from paycore.ledger.models import transfers
from paycore.ledger.postings import check_spec, transfer_values, write_entries_of_transfers
from paycore.ledger.types import Account, AccountTemplate, EntrySpec, TransferSpec

# A key is stored in ledger_transfers.idempotency_key: 1 to this many printable ASCII characters.
FEE_KEY_LENGTH_MAX: Final = 255
assert transfers.c.idempotency_key.type.length == FEE_KEY_LENGTH_MAX  # type: ignore[attr-defined]
# Fees per `book_processor_fees` call and keys per `booked_fees` call: one reconciliation
# chunk's lines (ADR 0014: 1,000), each call's statements bounded by it.
FEES_PER_CALL_MAX: Final = 1_000
FEE_KEYS_PER_READ_MAX: Final = FEES_PER_CALL_MAX
_FEES_CODE_PREFIX: Final = chart.PROCESSOR_FEES + "."
# A payout's adjustment kinds that are a bank's fee, and whether the fee is charged (True) or
# given back (False).
BANK_FEE_KINDS: Final = {"fee": True, "return_fee": True, "fee_reversal": False}


@dataclass(frozen=True)
class ProcessorFee:
    key: str  # e.g. `settlement-fee:<processor_id>`
    currency: str
    fee_minor: int
    payment_id: str | None = None  # the transfer references the payment when given


@dataclass(frozen=True)
class FeesBooked:
    booked: frozenset[str]  # the keys whose fee this call booked
    taken: frozenset[str]  # keys of transfers that are not processor fees (a client's): not booked


@dataclass(frozen=True)
class BankFeeAccounts:
    fees: str  # payouts.fees.CUR's id
    bank_cash: str  # bank.cash.CUR's id


def bank_fee_spec(
    kind: str, accounts: BankFeeAccounts, currency: str, amount_minor: int, payout_id: str
) -> TransferSpec:
    """The transfer of a bank's fee on a payout (`kind` one of BANK_FEE_KINDS): debit
    `payouts.fees`, credit `bank.cash`; a `fee_reversal` the other way round. It references the
    payout as an adjustment."""
    charged = BANK_FEE_KINDS[kind]
    debited, credited = (accounts.fees, accounts.bank_cash) if charged else (accounts.bank_cash, accounts.fees)
    return TransferSpec(
        entries=(EntrySpec(debited, "debit", amount_minor), EntrySpec(credited, "credit", amount_minor)),
        currency=currency,
        reference_type="adjustment",
        reference_id=payout_id,
        owner_id=payout_id,
    )


def book_processor_fee(
    connection: Connection,
    tenant_id: str,
    *,
    key: str,
    currency: str,
    fee_minor: int,
    now_us: int,
    owner_id: str,
    payment_id: str | None = None,
) -> bool:
    """Book `fee_minor` the processor kept (debit `processor.fees.CUR`, credit
    `processor.clearing.CUR`, both created on first use) under `key`, once per tenant and key.

    `owner_id`: what books it (a reconciliation run's id): the transfer is that flow's
    (docs/ledger.md, "Who may move a transfer").

    True: booked by this call. False: nothing booked, because that key's fee was booked before
    (at whatever amount: compare with `booked_fees`), or because `fee_minor` is 0.

    Raises, having booked nothing: InvalidRequest (param `key`) for a key that is not 1-255
    printable ASCII characters, UnsupportedCurrency, InvalidAmount for a fee that is not an
    int 0 ... 2^53 - 1, FeeKeyTaken when the key names a transfer that is not a processor fee.
    BalanceLimitExceeded or BalanceOverflow if an account's balance would pass its bound: then,
    as after every ledger refusal, the caller's transaction must be rolled back (or a savepoint
    around the call)."""
    fee = ProcessorFee(key, currency, fee_minor, payment_id)
    result = _book(connection, tenant_id, [fee], now_us, owner_id, one=True)
    if result.taken:
        raise FeeKeyTaken(f"the key {key!r} names a transfer that is not a processor fee", param="key")
    return key in result.booked


def book_processor_fees(
    connection: Connection, tenant_id: str, fees: Sequence[ProcessorFee], *, now_us: int, owner_id: str
) -> FeesBooked:
    """`book_processor_fee` for up to FEES_PER_CALL_MAX fees at once (about 40 statements for 1,000).

    A key given twice is booked once, at its first fee; a fee of 0 books nothing. A key that
    names a transfer that is not a processor fee is returned in `taken`, the others are booked.
    Raises the same typed errors (param `fees[i].<field>`) before writing anything."""
    return _book(connection, tenant_id, fees, now_us, owner_id, one=False)


def booked_fees(connection: Connection, tenant_id: str, keys: Collection[str]) -> dict[str, int]:
    """The processor fee booked under each of `keys` (at most FEE_KEYS_PER_READ_MAX), by key,
    in one statement; a key with no fee booked is left out (so is a key a client used for a
    transfer of its own). The amount is what the keyed transfer debited to the fees account;
    a later reversal of it (a person's correction) is not netted here."""
    assert len(keys) <= FEE_KEYS_PER_READ_MAX, f"{len(keys)} keys: read at most {FEE_KEYS_PER_READ_MAX} at once"
    wanted = set(keys)
    assert all(isinstance(key, str) for key in wanted)
    if not wanted:
        return {}
    found: dict[str, int] = {}
    for key, amount_minor in fees_repository.keyed_debits(connection, tenant_id, sorted(wanted), _FEES_CODE_PREFIX):
        assert key in wanted and type(amount_minor) is int and amount_minor > 0, (key, amount_minor)
        found[key] = found.get(key, 0) + amount_minor
    return found


def _book(
    connection: Connection, tenant_id: str, fees: Sequence[ProcessorFee], now_us: int, owner_id: str, *, one: bool
) -> FeesBooked:
    assert len(fees) <= FEES_PER_CALL_MAX, f"{len(fees)} fees: book at most {FEES_PER_CALL_MAX} at once"
    assert type(now_us) is int and now_us > 0, now_us
    assert 0 < len(owner_id) <= ID_LENGTH, owner_id
    for index, fee in enumerate(fees):
        _check_fee(fee, "" if one else f"fees[{index}].")
    first: dict[str, ProcessorFee] = {}
    for fee in fees:
        first.setdefault(fee.key, fee)
    # In key order: two calls inserting overlapping keys take them in one order, no deadlock.
    to_book = sorted((fee for fee in first.values() if fee.fee_minor > 0), key=lambda fee: fee.key)
    if not to_book:
        return FeesBooked(frozenset(), frozenset())
    by_code = _fee_accounts(connection, tenant_id, {fee.currency for fee in to_book}, now_us)
    by_id = {account.id: account for account in by_code.values()}
    planned = [_planned_transfer(connection, tenant_id, fee, by_code, now_us, owner_id) for fee in to_book]
    inserted = fees_repository.insert_keyed_transfers(connection, [values for values, _ in planned])
    written = [(values["id"], spec.entries) for values, spec in planned if values["idempotency_key"] in inserted]
    rows = write_entries_of_transfers(connection, tenant_id, written, by_id, now_us)
    assert len(rows) == 2 * len(inserted), (len(rows), len(inserted))
    conflicted = {fee.key for fee in to_book} - inserted
    taken = conflicted - booked_fees(connection, tenant_id, conflicted).keys() if conflicted else set()
    return FeesBooked(frozenset(inserted), frozenset(taken))


def _fee_accounts(connection: Connection, tenant_id: str, currencies: set[str], now_us: int) -> dict[str, Account]:
    """The fees and clearing accounts of each currency, by code (one read when they exist)."""
    templates = [
        AccountTemplate(code(currency), currency, "debit", no_overdraft=False)
        for currency in sorted(currencies)
        for code in (chart.processor_fees, chart.processor_clearing)
    ]
    return ensure_accounts(connection, tenant_id, templates, now_us=now_us)


def _planned_transfer(
    connection: Connection, tenant_id: str, fee: ProcessorFee, by_code: dict[str, Account], now_us: int, owner_id: str
) -> tuple[dict[str, Any], TransferSpec]:
    """The fee's transfer row and entries, checked (balanced, one currency) but not written."""
    fees, clearing = by_code[chart.processor_fees(fee.currency)], by_code[chart.processor_clearing(fee.currency)]
    spec = TransferSpec(
        entries=(EntrySpec(fees.id, "debit", fee.fee_minor), EntrySpec(clearing.id, "credit", fee.fee_minor)),
        currency=fee.currency,
        reference_type="payment" if fee.payment_id is not None else "adjustment",
        reference_id=fee.payment_id,
        owner_id=owner_id,
    )
    check_spec(connection, tenant_id, spec, "", {fees.id: fees, clearing.id: clearing})  # reads nothing
    return transfer_values(tenant_id, ids.new_id("txn"), "transfer", spec, now_us, fee.key, None), spec


def _check_fee(fee: ProcessorFee, prefix: str) -> None:
    key: object = fee.key
    if not isinstance(key, str) or not 0 < len(key) <= FEE_KEY_LENGTH_MAX or not _printable(key):
        message = f"a fee's key must be 1-{FEE_KEY_LENGTH_MAX} printable ASCII characters"
        raise InvalidRequest(message, param=f"{prefix}key")
    if not is_known_currency(fee.currency):
        raise UnsupportedCurrency(f"currency {fee.currency!r} is not supported", param=f"{prefix}currency")
    if not is_amount_minor(fee.fee_minor, allow_zero=True):
        message = "fee_minor must be an integer of minor units, 0 to 2^53 - 1"
        raise InvalidAmount(message, param=f"{prefix}fee_minor")
    assert fee.payment_id is None or 0 < len(fee.payment_id) <= ID_LENGTH, fee.payment_id


def _printable(text: str) -> bool:
    return all(" " <= char <= "~" for char in text)
