"""Tenant prepaid credits (SPEC §5), kept on the ledger.

Each tenant has, per currency, two ledger accounts created on first use:
- `credits.balance.<CUR>` (credit-normal, no_overdraft): what the tenant may spend;
- `credits.issued.<CUR>` (debit-normal): the contra account every grant is drawn from,
  so the ledger sums to zero.
A credit is one transfer issued -> balance for the sum of its lines; the balance is the
balance account's posted balance, derived from entries (cached totals verified).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Connection

from paycore.credits import repository
from paycore.kit import ids
from paycore.kit.errors import InvalidAmount, InvalidRequest, UnsupportedCurrency
from paycore.kit.money import checked_sum, is_amount_minor
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.service import AccountTemplate, EntrySpec, TransferSpec


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


def balance_code(currency: str) -> str:
    return chart.code(chart.CREDITS_BALANCE, currency)


def issued_code(currency: str) -> str:
    return chart.code(chart.CREDITS_ISSUED, currency)


def create_credit(
    connection: Connection,
    tenant_id: str,
    *,
    idempotency_key: str,
    lines: tuple[CreditLine, ...],
    enabled_currencies: frozenset[str],
    lines_max: int,
    now_us: int,
) -> Credit:
    currency = _check_lines(lines, enabled_currencies, lines_max)
    try:
        amount_minor = checked_sum([line.amount_minor for line in lines])
    except ValueError as error:
        raise InvalidAmount("the lines' amounts add up to more than 2^53 - 1", param="lines") from error
    accounts = ledger.ensure_accounts(
        connection,
        tenant_id,
        [
            AccountTemplate(balance_code(currency), currency, "credit", no_overdraft=True),
            AccountTemplate(issued_code(currency), currency, "debit", no_overdraft=False),
        ],
        now_us=now_us,
    )
    balance, issued = accounts[balance_code(currency)], accounts[issued_code(currency)]
    credit_id = ids.new_id("cr")
    spec = TransferSpec(
        entries=(
            EntrySpec(issued.id, "debit", amount_minor),
            EntrySpec(balance.id, "credit", amount_minor),
        ),
        currency=currency,
        reference_type="credit",
        reference_id=credit_id,
        owner_id=credit_id,
    )
    transfer = ledger.create_transfer(
        connection,
        tenant_id,
        spec,
        now_us=now_us,
        idempotency_key=idempotency_key,
        known_accounts={balance.id: balance, issued.id: issued},
    )
    credit = Credit(
        id=credit_id,
        tenant_id=tenant_id,
        idempotency_key=idempotency_key,
        currency=currency,
        amount_minor=amount_minor,
        lines=lines,
        transfer_id=transfer.id,
        created_at_us=now_us,
    )
    repository.insert_credit(connection, credit, _lines_json(lines))
    return credit


def balance_minor(connection: Connection, tenant_id: str, currency: str) -> int:
    account = ledger.find_account_by_code(connection, tenant_id, balance_code(currency))
    return 0 if account is None else account.balance.posted_minor


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


def _lines_json(lines: tuple[CreditLine, ...]) -> str:
    return json.dumps(
        [{"desc": line.desc, "amount_minor": line.amount_minor, "currency": line.currency} for line in lines]
    )
