"""Tenant prepaid credits (SPEC §5), kept on the ledger.

Each tenant has, per currency, two ledger accounts created on first use:
- `credits.balance.<CUR>` (credit-normal, no_overdraft): what the tenant may spend;
- `credits.issued.<CUR>` (debit-normal): the contra account every grant is drawn from,
  so the ledger sums to zero.
A credit is one transfer issued -> balance for the sum of its lines; the balance is the
balance account's posted balance, derived from entries (cached totals verified).

This is the reference path (SQLAlchemy Core, inside `idempotency.run`): the data plane
(`create.py`, ADR 0026) writes a credit in one round trip and leaves every refusal, every
replay and every key reused to this path, which decides and records them.
"""

from __future__ import annotations

from sqlalchemy import Connection

from paycore.credits import repository
from paycore.credits.plan import Credit as Credit
from paycore.credits.plan import CreditLine as CreditLine
from paycore.credits.plan import account_templates, check_lines, lines_json
from paycore.credits.plan import balance_code as balance_code
from paycore.credits.plan import issued_code as issued_code
from paycore.kit import ids
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec


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
    currency, amount_minor = check_lines(lines, enabled_currencies, lines_max)
    balance_template, issued_template = account_templates(currency)
    accounts = ledger.ensure_accounts(connection, tenant_id, [balance_template, issued_template], now_us=now_us)
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
    repository.insert_credit(connection, credit, lines_json(lines))
    return credit


def balance_minor(connection: Connection, tenant_id: str, currency: str) -> int:
    account = ledger.find_account_by_code(connection, tenant_id, balance_code(currency))
    return 0 if account is None else account.balance.posted_minor
