"""Checks of a payout request that need more than a schema: bank identifiers, rail and
currency pairs, the execution date. Each failure has its own code (docs/errors.md)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Final

from schwifty import BIC, IBAN
from schwifty.exceptions import SchwiftyException

from paycore.payouts.errors import (
    InvalidAccountNumber,
    InvalidBeneficiary,
    InvalidBic,
    InvalidExecuteOn,
    InvalidIban,
    InvalidRoutingNumber,
    UnsupportedRailCurrency,
)

RAIL_CURRENCIES: Final = {"ach": "USD", "sepa": "EUR"}
SCHEDULE_DAYS_MAX: Final = 365  # how far ahead a payout may be scheduled
_ABA_WEIGHTS: Final = (3, 7, 1) * 3


@dataclass(frozen=True)
class Beneficiary:
    name: str
    iban: str | None = None
    bic: str | None = None
    routing_number: str | None = None
    account_number: str | None = None


def check_rail(rail: str, currency: str) -> None:
    expected = RAIL_CURRENCIES.get(rail)
    if expected != currency:
        pairs = ", ".join(f"{r} with {c}" for r, c in RAIL_CURRENCIES.items())
        raise UnsupportedRailCurrency(f"{rail} does not carry {currency}: use {pairs}", param="currency")


def aba_check_digit_ok(routing_number: str) -> bool:
    """ABA routing numbers: 9 digits whose weighted sum (3, 7, 1, ...) is a multiple of 10."""
    if len(routing_number) != 9 or not routing_number.isascii() or not routing_number.isdigit():
        return False
    return sum(int(d) * w for d, w in zip(routing_number, _ABA_WEIGHTS, strict=True)) % 10 == 0


def normalize_beneficiary(rail: str, beneficiary: Beneficiary) -> Beneficiary:
    """The beneficiary with its identifiers in canonical form, or a clear 400."""
    if not beneficiary.name.strip() or not beneficiary.name.isprintable():
        raise InvalidBeneficiary("beneficiary.name must be printable text", param="beneficiary.name")
    if rail == "sepa":
        if beneficiary.routing_number is not None or beneficiary.account_number is not None:
            raise InvalidBeneficiary("a SEPA payout names an iban, not an ACH account", param="beneficiary")
        return Beneficiary(beneficiary.name, iban=_iban(beneficiary.iban), bic=_bic(beneficiary.bic))
    if beneficiary.iban is not None or beneficiary.bic is not None:
        raise InvalidBeneficiary(
            "an ACH payout names routing_number and account_number, not an iban", param="beneficiary"
        )
    routing = beneficiary.routing_number
    if routing is None or not aba_check_digit_ok(routing):
        raise InvalidRoutingNumber(
            "routing_number must be 9 digits with a valid ABA check digit", param="beneficiary.routing_number"
        )
    account = beneficiary.account_number
    if account is None or not (4 <= len(account) <= 17 and account.isascii() and account.isdigit()):
        raise InvalidAccountNumber("account_number must be 4 to 17 digits", param="beneficiary.account_number")
    return Beneficiary(beneficiary.name, routing_number=routing, account_number=account)


def _iban(raw: str | None) -> str:
    if raw is None:
        raise InvalidIban("a SEPA payout needs beneficiary.iban", param="beneficiary.iban")
    try:
        return str(IBAN(raw).compact)
    except (SchwiftyException, ValueError) as error:
        raise InvalidIban(f"beneficiary.iban is not a valid IBAN: {error}", param="beneficiary.iban") from error


def _bic(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return str(BIC(raw).compact)
    except (SchwiftyException, ValueError) as error:
        raise InvalidBic(f"beneficiary.bic is not a valid BIC: {error}", param="beneficiary.bic") from error


def execute_on(raw: str | None, *, today: dt.date) -> str:
    """The execution date (YYYY-MM-DD, UTC): today when absent; never in the past, at most
    SCHEDULE_DAYS_MAX days ahead."""
    if raw is None:
        return today.isoformat()
    try:
        day = dt.date.fromisoformat(raw)
    except ValueError as error:
        raise InvalidExecuteOn("execute_on must be a date YYYY-MM-DD", param="execute_on") from error
    if len(raw) != 10:
        raise InvalidExecuteOn("execute_on must be a date YYYY-MM-DD", param="execute_on")
    if day < today:
        raise InvalidExecuteOn(f"execute_on is in the past (today is {today.isoformat()} UTC)", param="execute_on")
    if (day - today).days > SCHEDULE_DAYS_MAX:
        raise InvalidExecuteOn(f"execute_on is more than {SCHEDULE_DAYS_MAX} days ahead", param="execute_on")
    return day.isoformat()


def mask(identifier: str | None) -> str | None:
    """The last four characters only: full account numbers never leave in responses or logs."""
    return None if identifier is None else identifier[-4:]
