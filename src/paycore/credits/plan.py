"""A credit, planned (ADR 0026): pure functions from the request to the rows to write.

In: the validated request (tenant, key, lines), the tenant's settings (enabled currencies,
lines_max), the account facts this process has cached, the clock and new ids. Out: a `Plan`
holding every row one credit writes (the accounts to ensure, the transfer, its two entries,
the credit and the key's row with its stored answer) and the answer, built from the plan,
never read back. No I/O here: the writers (`create_repository.py`) only send the plan.

The rules of a credit's request live here, once (`check_lines`); the reference path
(`service.create_credit`) calls them too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from paycore.kit.errors import InvalidAmount, InvalidRequest, UnsupportedCurrency
from paycore.kit.money import AMOUNT_MINOR_MAX, checked_sum, is_amount_minor, is_known_currency
from paycore.ledger import chart
from paycore.ledger.types import AccountTemplate

STATUS_CREATED = 201


@dataclass(frozen=True)
class CreditLine:
    desc: str
    amount_minor: int
    currency: str


@dataclass(frozen=True)
class Credit:
    id: str
    tenant_id: str
    idempotency_key: str
    currency: str
    amount_minor: int
    lines: tuple[CreditLine, ...]
    transfer_id: str
    created_at_us: int


@dataclass(frozen=True)
class CreditRequest:
    """A request that passed the HTTP edge (shapes, key), before the credit's own rules."""

    tenant_id: str
    idempotency_key: str
    request_fingerprint: str
    lines: tuple[CreditLine, ...]


@dataclass(frozen=True)
class NewIds:
    """The ids a credit may write: the accounts' are used only where an account is created."""

    credit_id: str
    transfer_id: str
    balance_account_id: str
    issued_account_id: str
    debit_entry_id: str
    credit_entry_id: str


@dataclass(frozen=True)
class PlannedAccount:
    """A credits account of the tenant: its id if known (cached), else the id it gets if created."""

    template: AccountTemplate
    id: str
    known: bool


@dataclass(frozen=True)
class PlannedEntry:
    id: str
    account_code: str
    direction: str
    amount_minor: int


@dataclass(frozen=True)
class Plan:
    credit: Credit
    lines_json: str
    # issued (debit-normal, debited) first, then balance (credit-normal, credited): the order
    # of the transfer's entries on the reference path.
    accounts: tuple[PlannedAccount, PlannedAccount]
    entries: tuple[PlannedEntry, PlannedEntry]
    request_fingerprint: str
    answer_status: int
    answer_body: str

    @property
    def accounts_to_ensure(self) -> tuple[PlannedAccount, ...]:
        return tuple(account for account in self.accounts if not account.known)


def balance_code(currency: str) -> str:
    return chart.code(chart.CREDITS_BALANCE, currency)


def issued_code(currency: str) -> str:
    return chart.code(chart.CREDITS_ISSUED, currency)


def account_templates(currency: str) -> tuple[AccountTemplate, AccountTemplate]:
    """(balance, issued): the tenant's two credits accounts of `currency` (service.py says why)."""
    return (
        AccountTemplate(balance_code(currency), currency, "credit", no_overdraft=True),
        AccountTemplate(issued_code(currency), currency, "debit", no_overdraft=False),
    )


def check_lines(lines: tuple[CreditLine, ...], enabled: frozenset[str], lines_max: int) -> tuple[str, int]:
    """The credit's currency and amount, or the refusal of its lines (not recorded: a bad request)."""
    currency = _check_lines(lines, enabled, lines_max)
    try:
        amount_minor = checked_sum([line.amount_minor for line in lines])
    except ValueError as error:
        raise InvalidAmount("the lines' amounts add up to more than 2^53 - 1", param="lines") from error
    return currency, amount_minor


def _check_lines(lines: tuple[CreditLine, ...], enabled: frozenset[str], lines_max: int) -> str:
    if not 1 <= len(lines) <= lines_max:
        raise InvalidRequest(f"lines must hold 1 to {lines_max} lines", param="lines")
    for index, line in enumerate(lines):
        if not is_amount_minor(line.amount_minor):
            raise InvalidAmount("amount_minor must be a positive JSON integer", param=f"lines[{index}].amount_minor")
        if line.currency not in enabled:
            raise UnsupportedCurrency(
                f"currency {line.currency!r} is not enabled for credits (enabled: {', '.join(sorted(enabled))})",
                param=f"lines[{index}].currency",
            )
    currencies = {line.currency for line in lines}
    if len(currencies) != 1:
        raise UnsupportedCurrency("all lines of one credit must share a currency", param="lines")
    return currencies.pop()


def lines_json(lines: tuple[CreditLine, ...]) -> str:
    """The lines as the credit row stores them."""
    return json.dumps(
        [{"desc": line.desc, "amount_minor": line.amount_minor, "currency": line.currency} for line in lines]
    )


def plan_credit(
    request: CreditRequest,
    *,
    enabled_currencies: frozenset[str],
    lines_max: int,
    known_account_ids: Callable[[str], str | None],
    now_us: int,
    new_ids: NewIds,
    render: Callable[[Credit], str],
) -> Plan:
    """The rows of one credit and its answer. Raises the request's refusal (as the reference
    path does); `known_account_ids(code)` is the cached id of the tenant's account, or None.
    `render` makes the answer's body from the credit, as the reference path stores it."""
    currency, amount_minor = check_lines(request.lines, enabled_currencies, lines_max)
    if not is_known_currency(currency):  # what creating its accounts would refuse
        raise UnsupportedCurrency(f"currency {currency!r} is not supported", param="currency")
    credit = Credit(
        id=new_ids.credit_id,
        tenant_id=request.tenant_id,
        idempotency_key=request.idempotency_key,
        currency=currency,
        amount_minor=amount_minor,
        lines=request.lines,
        transfer_id=new_ids.transfer_id,
        created_at_us=now_us,
    )
    balance, issued = account_templates(currency)
    accounts = (
        _planned(issued, new_ids.issued_account_id, known_account_ids),
        _planned(balance, new_ids.balance_account_id, known_account_ids),
    )
    entries = (
        PlannedEntry(new_ids.debit_entry_id, issued.code, "debit", amount_minor),
        PlannedEntry(new_ids.credit_entry_id, balance.code, "credit", amount_minor),
    )
    plan = Plan(
        credit=credit,
        lines_json=lines_json(request.lines),
        accounts=accounts,
        entries=entries,
        request_fingerprint=request.request_fingerprint,
        answer_status=STATUS_CREATED,
        answer_body=render(credit),
    )
    _check_plan(plan)
    return plan


def _planned(template: AccountTemplate, new_id: str, known_account_ids: Callable[[str], str | None]) -> PlannedAccount:
    known = known_account_ids(template.code)
    return PlannedAccount(template, new_id if known is None else known, known is not None)


def _check_plan(plan: Plan) -> None:
    """Pair assertions: the entries balance, and the credit's amount is the transfer's."""
    credit, (debit, credit_entry) = plan.credit, plan.entries
    assert (debit.direction, credit_entry.direction) == ("debit", "credit")
    assert debit.amount_minor - credit_entry.amount_minor == 0, "a transfer's entries sum to zero"
    assert debit.amount_minor == credit.amount_minor == sum(line.amount_minor for line in credit.lines)
    assert 0 < credit.amount_minor <= AMOUNT_MINOR_MAX
    assert [account.template.code for account in plan.accounts] == [debit.account_code, credit_entry.account_code]
    assert all(account.template.currency == credit.currency for account in plan.accounts)
