"""Helpers for the payout tests: a funded source account, payouts scheduled through the
service, moved through the transition table, and the ledger's view of each one."""

from __future__ import annotations

import itertools
from typing import Any

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.payouts import lifecycle, service, states
from paycore.payouts.types import NewPayout, Payout
from paycore.payouts.validation import Beneficiary

ACH = Beneficiary("Ada Lovelace", routing_number="110000000", account_number="000123456789")
SEPA = Beneficiary("Émilie du Châtelet", iban="DE89370400440532013000")
_codes = itertools.count(1)


def funded_source(database: Database, tenant_id: str, amount_minor: int, *, currency: str = "USD") -> str:
    """A credit-normal account holding `amount_minor`, funded from a platform account. It is
    *not* no_overdraft: the payout's guard alone must keep it from paying out too much."""

    def work(connection: Connection) -> str:
        number = next(_codes)
        now = now_us()
        source = ledger.create_account(
            connection,
            tenant_id,
            code=f"seller.{number}",
            currency=currency,
            normal_balance="credit",
            no_overdraft=False,
            metadata={},
            now_us=now,
        )
        funding = ledger.create_account(
            connection,
            tenant_id,
            code=f"funding.{number}",
            currency=currency,
            normal_balance="debit",
            no_overdraft=False,
            metadata={},
            now_us=now,
        )
        if amount_minor:
            spec = TransferSpec(
                entries=(EntrySpec(funding.id, "debit", amount_minor), EntrySpec(source.id, "credit", amount_minor))
            )
            ledger.create_transfer(connection, tenant_id, spec, now_us=now)
        return source.id

    return database.transaction(work)


def schedule(
    database: Database,
    tenant_id: str,
    source_id: str,
    amount_minor: int,
    *,
    rail: str = "ach",
    beneficiary: Beneficiary | None = None,
    execute_on: str | None = None,
    key: str | None = None,
) -> Payout:
    new = NewPayout(
        amount_minor=amount_minor,
        currency="USD" if rail == "ach" else "EUR",
        source_account_id=source_id,
        rail=rail,
        beneficiary=beneficiary or (ACH if rail == "ach" else SEPA),
        execute_on=execute_on,
        idempotency_key=key,
    )
    return database.transaction(
        lambda connection: service.schedule(connection, tenant_id, new, actor="local", now_us=now_us())
    )


def move(database: Database, payout: Payout, *path: str, **values: Any) -> Payout:
    """Walk `payout` through `path` (each step must be allowed); returns it at the end."""

    def work(connection: Connection) -> Payout:
        current = service.MACHINE.load(connection, payout.tenant_id, payout.id, for_update=True)
        for step in path:
            moved = lifecycle.MACHINE.move(
                connection, current, step, cause="test", actor="local", now_us=now_us(), values=values or None
            )
            assert moved.changed, (current.status, step)
            current = moved.item
        return current

    return database.transaction(work)


def load(database: Database, payout: Payout) -> Payout:
    with database.read() as connection:
        return service.MACHINE.load(connection, payout.tenant_id, payout.id)


def balance(database: Database, tenant_id: str, account_id: str) -> tuple[int, int, int]:
    """(posted, pending, available) of the account."""
    with database.read() as connection:
        found = ledger.get_account(connection, tenant_id, account_id).balance
    return found.posted_minor, found.pending_minor, found.available_minor


def system_balance(database: Database, tenant_id: str, code: str) -> int:
    """The posted balance of a system account by code (0 if it does not exist yet)."""
    with database.read() as connection:
        found = ledger.find_account_by_code(connection, tenant_id, code)
    return 0 if found is None else found.balance.posted_minor


PATH_TO: dict[str, tuple[str, ...]] = {
    states.SCHEDULED: (),
    states.QUEUED: (states.QUEUED,),
    states.PROCESSING: (states.QUEUED, states.PROCESSING),
    states.IN_DOUBT: (states.QUEUED, states.PROCESSING, states.IN_DOUBT),
    states.SENT: (states.QUEUED, states.PROCESSING, states.SENT),
    states.SETTLED: (states.QUEUED, states.PROCESSING, states.SENT, states.SETTLED),
    states.FAILED: (states.QUEUED, states.PROCESSING, states.FAILED),
    states.RETURNED: (states.QUEUED, states.PROCESSING, states.SENT, states.SETTLED, states.RETURNED),
    states.CANCELED: (states.CANCELED,),
}


def books_ok(database: Database) -> bool:
    """`paycore ledger verify` over the whole database."""
    from paycore.ledger.verify import verify

    with database.read() as connection:
        report = verify(connection)
    return bool(report.ok)
