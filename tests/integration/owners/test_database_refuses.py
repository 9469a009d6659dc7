"""The database holds the rules of who may move a transfer itself (migration 0022), whatever
wrote the rows: a resolution or reversal of a flow's transfer without its owner, and an entry on
a system account in a transfer no flow owns, are refused by triggers on both databases, and by
the ledger API's one-call function on PostgreSQL when called past Python's own check."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.kit import ids
from paycore.kit.clock import now_us
from paycore.ledger import chart, keyed, repository, transfer_repository
from paycore.ledger import service as ledger
from paycore.ledger.accounts import load_account_facts
from paycore.ledger.models import entries, transfers
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.ledger.transfer_plan import plan_transfer
from tests.support.refunds import create_refund, new_payment, open_merchant

TENANT = "acme"


def transfer_row(**values: Any) -> dict[str, Any]:
    return {
        "tenant_id": TENANT,
        "id": ids.new_id("txn"),
        "kind": "transfer",
        "pending_id": None,
        "reverses_id": None,
        "batch_id": None,
        "idempotency_key": None,
        "reference_type": "adjustment",
        "reference_id": None,
        "owner_id": None,
        "metadata": "{}",
        "expires_at_us": None,
        "created_at_us": now_us(),
        **values,
    }


def entry_row(transfer_id: str, account_id: str, direction: str, sequence: int) -> dict[str, Any]:
    return {
        "tenant_id": TENANT,
        "id": ids.new_id("ent"),
        "transfer_id": transfer_id,
        "account_id": account_id,
        "direction": direction,
        "amount_minor": 100,
        "currency": "USD",
        "account_sequence": sequence,
        "created_at_us": now_us(),
    }


def refused(database: Database, write: Any) -> str:
    """The database's refusal of `write(connection)`, as text; nothing is committed."""
    with pytest.raises(DBAPIError) as raised, database.engine.begin() as connection:
        write(connection)
    return str(raised.value.orig)


def business(database: Database) -> dict[str, str]:
    merchant = open_merchant(database, TENANT)
    payment_id = new_payment(database, TENANT, merchant, 1_000, now_us=now_us())
    refund_id = create_refund(database, TENANT, payment_id, 400, now_us=now_us())
    with database.read() as connection:
        clearing = ledger.find_account_by_code(connection, TENANT, chart.processor_clearing("USD"))
        payment_transfer = connection.execute(
            text("SELECT transfer_id FROM payments WHERE tenant_id = :t AND id = :id"), {"t": TENANT, "id": payment_id}
        ).scalar_one()
        refund_hold = connection.execute(
            text("SELECT transfer_id FROM refunds WHERE tenant_id = :t AND id = :id"), {"t": TENANT, "id": refund_id}
        ).scalar_one()
    assert clearing is not None and clearing.system
    return {
        "merchant": merchant,
        "clearing": clearing.id,
        "payment": payment_id,
        "payment_transfer": payment_transfer,
        "refund": refund_id,
        "refund_hold": refund_hold,
    }


def test_a_flows_transfer_is_resolved_or_reversed_by_its_owner_only(database: Database) -> None:
    found = business(database)
    void = transfer_row(kind="void", pending_id=found["refund_hold"], reference_type="refund")
    reversal = transfer_row(reverses_id=found["payment_transfer"], reference_type="payment")
    for row in (void, reversal):
        message = refused(database, lambda c, row=row: c.execute(transfers.insert().values(**row)))
        assert "managed_transfer" in message or "only its owner" in message, message

    with database.engine.connect() as connection, connection.begin() as transaction:  # its owner may
        connection.execute(transfers.insert().values(**{**void, "owner_id": found["refund"]}))
        transaction.rollback()


def test_no_transfer_without_an_owner_moves_a_system_account(database: Database) -> None:
    found = business(database)
    unowned = transfer_row()

    def write(connection: Connection) -> None:
        connection.execute(transfers.insert().values(**unowned))
        connection.execute(
            entries.insert(),
            [
                entry_row(unowned["id"], found["clearing"], "credit", 1_000),
                entry_row(unowned["id"], found["merchant"], "debit", 1_000),
            ],
        )

    message = refused(database, write)
    assert "system_account" in message or "system account" in message, message
    with database.read() as connection:
        assert ledger.get_account(connection, TENANT, found["clearing"]).balance.posted_minor == 1_000


def test_the_one_call_function_refuses_a_system_account_too(database: Database) -> None:
    """PostgreSQL's `paycore_create_transfer` (the ledger API's path) called with a spec that
    Python would refuse: the entry trigger refuses it inside the function (SQLSTATE PC004)."""
    if not database.is_postgres:
        pytest.skip("the one-call function is PostgreSQL's")
    found = business(database)
    spec = TransferSpec((EntrySpec(found["clearing"], "debit", 500), EntrySpec(found["merchant"], "credit", 500)))
    scope = idempotency.KeyScope(
        tenant_id=TENANT,
        key="past-the-check",
        request_fingerprint="f",
        now_us=now_us(),
        expires_at_us=None,
    )
    with database.autocommit() as connection:
        accounts = load_account_facts(connection, TENANT, [found["clearing"], found["merchant"]])
        # Planned as a flow's, so that Python's own check lets it through; the call's parameters
        # carry no owner, so the function receives the tenant's transfer the spec describes.
        owned = replace(spec, owner_id="pay_flow")
        body = '[{"account_sequence":0},{"account_sequence":0}]'  # where the call's two numbers go
        plan = plan_transfer(scope, owned, accounts, new_ids=keyed.new_ids(2), render=lambda _: body)
        assert plan is not None
        with pytest.raises(DBAPIError) as raised:
            repository.create_transfer_call(connection, transfer_repository.call_params(plan))
    assert getattr(raised.value.orig, "sqlstate", None) == "PC004"
    with database.read() as connection:
        assert ledger.get_account(connection, TENANT, found["clearing"]).balance.posted_minor == 1_000
