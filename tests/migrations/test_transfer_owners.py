"""Revisions 0021-0022 fill `ledger_transfers.owner_id` and `ledger_accounts.system` for a ledger
written before they existed, exactly as today's code writes them: a database populated with
every kind of flow transfer and of tenant transfer is taken down to 0020 (the columns dropped)
and up again, and every owner and flag comes back as it was. On SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
from functools import partial
from typing import Any

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import Connection, text

from paycore.credits import service as credits
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payouts import states
from tests.migrations.test_retire_settled import bank_news
from tests.support import payouts as support
from tests.support.refunds import create_refund, fail_refund, new_payment, open_merchant

TENANT = "default"
_keys = itertools.count(1)


def api(client: TestClient, path: str, body: Any = None) -> dict[str, Any]:
    response = client.post(path, json=body, headers={"Idempotency-Key": f"k-{next(_keys)}"})
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def tenant_transfers(client: TestClient, payment_id: str) -> None:
    """The tenant's own, through the ledger API: plain, held then posted, voided or left open,
    reversed (and the reversal reversed), a batch, and one that names a payment as its reference."""
    accounts = [
        api(client, "/v1/accounts", {"code": code, "currency": "USD", "normal_balance": normal})["id"]
        for code, normal in (("bank.main", "debit"), ("shop.main", "credit"))
    ]
    simple = {"debit_account_id": accounts[0], "credit_account_id": accounts[1], "currency": "USD"}

    def transfer(amount_minor: int, **extra: Any) -> str:
        return str(api(client, "/v1/transfers", {**simple, "amount_minor": amount_minor, **extra})["id"])

    api(client, f"/v1/transfers/{transfer(10, pending=True)}/post")
    api(client, f"/v1/transfers/{transfer(20, pending=True)}/void")
    transfer(30, pending=True)
    reversal = api(client, f"/v1/transfers/{transfer(40)}/reverse")
    api(client, f"/v1/transfers/{reversal['id']}/reverse")
    api(client, "/v1/transfers/batch", {"transfers": [{**simple, "amount_minor": 50}, {**simple, "amount_minor": 60}]})
    transfer(70, reference_type="payment", reference_id=payment_id)


def flows(database: Database) -> str:
    """Every flow's transfers: payments and refunds, payouts in every status (with a bank fee, a
    return, a rejection after the bank took it), a credit, a reconciliation run's fees."""
    merchant = open_merchant(database, TENANT)
    payment_id = new_payment(database, TENANT, merchant, 10_000, now_us=now_us())
    create_refund(database, TENANT, payment_id, 1_000, now_us=now_us())
    assert fail_refund(database, TENANT, create_refund(database, TENANT, payment_id, 2_000, now_us=now_us()))
    source = support.funded_source(database, TENANT, 1_000_000)
    for status in states.STATUSES:
        support.move(database, support.schedule(database, TENANT, source, 1_000), *support.PATH_TO[status])
    sent = support.move(database, support.schedule(database, TENANT, source, 2_000), *support.PATH_TO[states.SENT])
    support.move(database, sent, states.FAILED)
    settled = support.move(
        database, support.schedule(database, TENANT, source, 3_000), *support.PATH_TO[states.SETTLED]
    )
    for returned in (False, True):  # the bank's fee, then the payout's return
        database.transaction(partial(bank_news, seen=settled, returned=returned))

    def money(connection: Connection) -> None:
        at_us = now_us()
        credits.create_credit(
            connection,
            TENANT,
            idempotency_key="credit-1",
            lines=(credits.CreditLine("welcome", 500, "USD"),),
            enabled_currencies=frozenset({"USD"}),
            lines_max=10,
            now_us=at_us,
        )
        run_id = "rcn_01backfill"
        key = f"settlement-fees:{run_id}:1:USD"  # reconciliation's key, as chunks.py makes it
        assert ledger.book_processor_fee(
            connection, TENANT, key=key, currency="USD", fee_minor=320, now_us=at_us, owner_id=run_id
        )

    database.transaction(money)
    return payment_id


def owners(database: Database) -> tuple[dict[str, Any], dict[str, bool]]:
    with database.read() as connection:
        transfers = {
            row.id: row.owner_id for row in connection.execute(text("SELECT id, owner_id FROM ledger_transfers"))
        }
        systems = {
            row.code: bool(row.system) for row in connection.execute(text("SELECT code, system FROM ledger_accounts"))
        }
    return transfers, systems


def test_the_backfill_gives_every_transfer_the_owner_the_code_writes(database: Database, client: TestClient) -> None:
    payment_id = flows(database)
    tenant_transfers(client, payment_id)
    transfers, systems = owners(database)
    kinds = {owner.split("_", 1)[0] for owner in transfers.values() if owner is not None}
    assert kinds == {"pay", "rf", "po", "cr", "rcn"}, kinds
    assert sum(owner is None for owner in transfers.values()) >= 12  # the tenant's, untouched
    assert {code for code, system in systems.items() if system} == {
        "processor.clearing.USD",
        "processor.fees.USD",
        "credits.balance.USD",
        "credits.issued.USD",
        "payouts.in_transit.USD",
        "bank.cash.USD",
        "payouts.fees.USD",
        "payouts.losses.USD",
    }

    migrate.run(database, lambda config: command.downgrade(config, "0020"))
    with database.read() as connection:
        columns = connection.execute(text("SELECT * FROM ledger_transfers")).keys()
    assert "owner_id" not in columns
    migrate.upgrade(database)
    assert owners(database) == (transfers, systems)
