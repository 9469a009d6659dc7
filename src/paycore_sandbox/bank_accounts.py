"""The bank rail's test accounts, and the checks a payout request passes before anything is
stored.

Outcomes are chosen by the beneficiary's account, like a bank's public test accounts:

| rail | account                          | outcome                                           |
|------|----------------------------------|---------------------------------------------------|
| ACH  | account_number `000111111113`    | rejected `R03` (no account / unable to locate)    |
| ACH  | account_number `000111111116`    | rejected `R04` (invalid account number)           |
| ACH  | account_number `000222222227`    | settled, then returned `R01` (insufficient funds) |
| ACH  | account_number `000333333335`    | settled, then returned `R02` (account closed)     |
| ACH  | account_number `000444444440`    | settled, then returned `R10` late (unauthorized)  |
| ACH  | account_number `000555555553`    | settled, then returned `R29` (corporate not authorized) |
| ACH  | any other (`000123456789`)       | settled                                           |
| SEPA | IBAN ending `0001`               | rejected `AC01` (incorrect account number)        |
| SEPA | IBAN ending `0002`               | rejected `AC04` (closed account)                  |
| SEPA | IBAN ending `0003`               | settled, then returned `AC04`, less the returning bank's charges |
| SEPA | IBAN ending `0004`               | settled, then returned `MD07` (beneficiary deceased) |
| SEPA | IBAN ending `0005`               | settled, then returned `FOCR` late (recall accepted) |
| SEPA | any other (`DE89370400440532013000`) | settled                                       |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from schwifty import BIC, IBAN

from paycore.processor.port import PayoutRequest, ProcessorRefused
from paycore_sandbox.checks import check_money, check_text
from paycore_sandbox.limits import (
    ACCOUNT_NUMBER_LENGTH_MAX,
    ACCOUNT_NUMBER_LENGTH_MIN,
    ACH_AMOUNT_MINOR_MAX,
    BENEFICIARY_NAME_LENGTH_MAX,
    BIC_LENGTH_MAX,
    IBAN_LENGTH_MAX,
    MERCHANT_ID_LENGTH_MAX,
    REQUEST_ID_LENGTH_MAX,
    ROUTING_NUMBER_LENGTH,
    SEPA_AMOUNT_MINOR_MAX,
)

Outcome = Literal["settled", "rejected", "returned"]
RAIL_CURRENCIES: Final[dict[str, str]] = {"ach": "USD", "sepa": "EUR"}
RAIL_AMOUNT_MINOR_MAX: Final[dict[str, int]] = {"ach": ACH_AMOUNT_MINOR_MAX, "sepa": SEPA_AMOUNT_MINOR_MAX}
_ABA_WEIGHTS: Final = (3, 7, 1, 3, 7, 1, 3, 7, 1)


@dataclass(frozen=True)
class Plan:
    """What the bank will do with a payout, decided when it is accepted."""

    outcome: Outcome
    code: str | None = None  # the rejection's or the return's reason code
    late: bool = False  # a return that comes after bank_late_return_after_ms
    deducts_charges: bool = False  # the returning bank keeps sepa_return_charges_minor

    def __post_init__(self) -> None:
        assert (self.outcome == "settled") == (self.code is None)
        assert not (self.late or self.deducts_charges) or self.outcome == "returned"


SETTLES: Final = Plan("settled")
ACH_TEST_ACCOUNTS: Final[dict[str, Plan]] = {
    "000111111113": Plan("rejected", "R03"),
    "000111111116": Plan("rejected", "R04"),
    "000222222227": Plan("returned", "R01"),
    "000333333335": Plan("returned", "R02"),
    "000444444440": Plan("returned", "R10", late=True),
    "000555555553": Plan("returned", "R29"),
}
SEPA_TEST_IBAN_ENDINGS: Final[dict[str, Plan]] = {
    "0001": Plan("rejected", "AC01"),
    "0002": Plan("rejected", "AC04"),
    "0003": Plan("returned", "AC04", deducts_charges=True),
    "0004": Plan("returned", "MD07"),
    "0005": Plan("returned", "FOCR", late=True),
}


def plan_for(request: PayoutRequest) -> Plan:
    """The test account's outcome; the request has passed `check_payout`."""
    if request.rail == "ach":
        assert request.account_number is not None
        return ACH_TEST_ACCOUNTS.get(request.account_number, SETTLES)
    assert request.iban is not None
    return SEPA_TEST_IBAN_ENDINGS.get(compact_iban(request.iban)[-4:], SETTLES)


def compact_iban(iban: str) -> str:
    return str(IBAN(iban).compact)


def is_valid_routing_number(value: str) -> bool:
    """Nine digits whose weighted sum (3, 7, 1, ...) is a multiple of 10: the ABA check digit."""
    if len(value) != ROUTING_NUMBER_LENGTH or not (value.isascii() and value.isdigit()):
        return False
    return sum(int(digit) * weight for digit, weight in zip(value, _ABA_WEIGHTS, strict=True)) % 10 == 0


def check_payout(request: PayoutRequest) -> None:
    check_text("request_id", request.request_id, REQUEST_ID_LENGTH_MAX)
    check_text("merchant_id", request.merchant_id, MERCHANT_ID_LENGTH_MAX)
    check_money(request.amount_minor, request.currency)
    if not isinstance(request.rail, str) or request.rail not in RAIL_CURRENCIES:
        raise ProcessorRefused("invalid_request", f"rail must be 'ach' or 'sepa', got {request.rail!r}")
    if request.currency != RAIL_CURRENCIES[request.rail]:
        raise ProcessorRefused(
            "invalid_currency", f"{request.rail} payouts are in {RAIL_CURRENCIES[request.rail]}, not {request.currency}"
        )
    amount_minor_max = RAIL_AMOUNT_MINOR_MAX[request.rail]
    if request.amount_minor > amount_minor_max:
        raise ProcessorRefused("invalid_amount", f"a {request.rail} payout is at most {amount_minor_max} minor units")
    check_text("beneficiary_name", request.beneficiary_name, BENEFICIARY_NAME_LENGTH_MAX)
    if request.rail == "ach":
        _check_ach_account(request)
    else:
        _check_sepa_account(request)


def _check_ach_account(request: PayoutRequest) -> None:
    if request.iban is not None or request.bic is not None:
        raise ProcessorRefused("invalid_request", "an ach payout has a routing_number and account_number, no iban/bic")
    if not isinstance(request.routing_number, str) or not is_valid_routing_number(request.routing_number):
        raise ProcessorRefused("invalid_account", "routing_number must be 9 digits with a valid ABA check digit")
    number = request.account_number
    length_ok = isinstance(number, str) and ACCOUNT_NUMBER_LENGTH_MIN <= len(number) <= ACCOUNT_NUMBER_LENGTH_MAX
    if not (length_ok and isinstance(number, str) and number.isascii() and number.isdigit()):
        raise ProcessorRefused(
            "invalid_account",
            f"account_number must be {ACCOUNT_NUMBER_LENGTH_MIN} to {ACCOUNT_NUMBER_LENGTH_MAX} digits",
        )


def _check_sepa_account(request: PayoutRequest) -> None:
    if request.routing_number is not None or request.account_number is not None:
        raise ProcessorRefused("invalid_request", "a sepa payout has an iban (and optionally a bic), no routing_number")
    if not isinstance(request.iban, str) or not 1 <= len(request.iban) <= IBAN_LENGTH_MAX:
        raise ProcessorRefused("invalid_account", "a sepa payout needs an iban")
    try:
        iban = IBAN(request.iban)
    except ValueError as error:  # schwifty's errors are ValueErrors, with a readable reason
        raise ProcessorRefused("invalid_account", f"invalid iban: {error}") from None
    if not iban.in_sepa_zone:
        raise ProcessorRefused("invalid_account", f"iban country {iban.country_code} is not in the SEPA zone")
    if request.bic is None:
        return
    if not isinstance(request.bic, str) or len(request.bic) > BIC_LENGTH_MAX:
        raise ProcessorRefused("invalid_account", f"bic must be a string of at most {BIC_LENGTH_MAX} characters")
    try:
        BIC(request.bic)
    except ValueError as error:
        raise ProcessorRefused("invalid_account", f"invalid bic: {error}") from None
