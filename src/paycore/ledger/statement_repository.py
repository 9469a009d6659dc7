"""The SQL of an account's statement with its running balance (`ledger.statement`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, case, func, select

from paycore.ledger.models import accounts, entries, transfers


def statement_facts(connection: Connection, tenant_id: str, account_id: str) -> Any:
    """The account's posted totals and its entry count, read together (one row): the totals are
    exactly what its entries 1..entries_count posted."""
    columns = (accounts.c.debits_posted_minor, accounts.c.credits_posted_minor, accounts.c.entries_count)
    query = select(*columns).where(accounts.c.tenant_id == tenant_id, accounts.c.id == account_id)
    return connection.execute(query).first()


def posted_between(
    connection: Connection, tenant_id: str, account_id: str, *, after_sequence: int, through_sequence: int
) -> tuple[int, int]:
    """(debits, credits) the account's entries with after < account_sequence <= through posted:
    a range of the unique index on (tenant_id, account_id, account_sequence), each entry's
    transfer by its key. A hold's entries (a `pending` transfer's) are left out: they count in
    pending until their post, which has entries of its own (a void or an expiry has none)."""
    debit = func.sum(case((entries.c.direction == "debit", entries.c.amount_minor), else_=0))
    credit = func.sum(case((entries.c.direction == "credit", entries.c.amount_minor), else_=0))
    on = and_(transfers.c.tenant_id == entries.c.tenant_id, transfers.c.id == entries.c.transfer_id)
    query = (
        select(func.coalesce(debit, 0), func.coalesce(credit, 0))
        .select_from(entries.join(transfers, on))
        .where(
            entries.c.tenant_id == tenant_id,
            entries.c.account_id == account_id,
            entries.c.account_sequence > after_sequence,
            entries.c.account_sequence <= through_sequence,
            transfers.c.kind != "pending",
        )
    )
    debits, credits = connection.execute(query).one()
    return int(debits), int(credits)  # PostgreSQL's sum of bigint is numeric: exact, never a float
