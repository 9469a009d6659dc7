"""The chart of accounts: every system account paycore books to, by code, per tenant and
currency (docs/ledger.md, "The chart of accounts"). The one place an account code is built.

System accounts are paycore's own: they carry `system` (a column the database checks: an entry
on one needs a transfer that a flow owns), only the flows move money on them, and every code
under their prefixes is reserved (`is_reserved`): a tenant cannot create `bank.cash.EUR` before
paycore does and so have paycore book to an account of the tenant's making.

Tenant accounts (a merchant's balance, a payout's source) are the tenant's own and have ids,
not codes. System accounts are created on first use (`ledger.service.ensure_accounts`), one per
code, with the normal balance given here.

| code                        | normal | what it holds                                              |
|-----------------------------|--------|------------------------------------------------------------|
| `processor.clearing.CUR`    | debit  | money the processor owes the tenant (payments in; refunds, fees out) |
| `processor.fees.CUR`        | debit  | fees the processor took (kept out of what it collected)    |
| `credits.balance.CUR`       | credit | credits issued to a tenant's users and not yet spent (no overdraft) |
| `credits.issued.CUR`        | debit  | the other side of issued credits                           |
| `payouts.in_transit.CUR`    | credit | promised to the bank, not yet paid out                      |
| `bank.cash.CUR`             | debit  | the platform's bank account as the bank reports it          |
| `payouts.fees.CUR`          | debit  | fees the bank charged                                       |
| `payouts.losses.CUR`        | debit  | money paid out that did not come back                       |
"""

from __future__ import annotations

from typing import Final, Literal

Normal = Literal["debit", "credit"]

PROCESSOR_CLEARING: Final = "processor.clearing"
PROCESSOR_FEES: Final = "processor.fees"
CREDITS_BALANCE: Final = "credits.balance"
CREDITS_ISSUED: Final = "credits.issued"
PAYOUTS_IN_TRANSIT: Final = "payouts.in_transit"
BANK_CASH: Final = "bank.cash"
PAYOUTS_FEES: Final = "payouts.fees"
PAYOUTS_LOSSES: Final = "payouts.losses"

NORMAL_BALANCE: Final[dict[str, Normal]] = {
    PROCESSOR_CLEARING: "debit",
    PROCESSOR_FEES: "debit",
    CREDITS_BALANCE: "credit",
    CREDITS_ISSUED: "debit",
    PAYOUTS_IN_TRANSIT: "credit",
    BANK_CASH: "debit",
    PAYOUTS_FEES: "debit",
    PAYOUTS_LOSSES: "debit",
}


def code(prefix: str, currency: str) -> str:
    """The account code of system account `prefix` in `currency`, e.g. `bank.cash.EUR`."""
    assert prefix in NORMAL_BALANCE, f"{prefix} is not in the chart of accounts"
    return f"{prefix}.{currency}"


def processor_clearing(currency: str) -> str:
    return code(PROCESSOR_CLEARING, currency)


def processor_fees(currency: str) -> str:
    return code(PROCESSOR_FEES, currency)


def is_reserved(code: str) -> bool:
    """Whether `code` lies under a system account's prefix (`processor.clearing.` and the
    rest): such codes are paycore's to create, whatever their currency part."""
    return any(code.startswith(prefix + ".") for prefix in NORMAL_BALANCE)
