"""The books against the flows' states (paycore.invariants.books, docs/invariants.md): a clean
business of every flow reports nothing; then the database is tampered with directly, one
mismatch per check, and the job, `/metrics`, the console and `paycore ledger verify` each name
the object. On SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Connection, text

from paycore.config import Settings
from paycore.credits import service as credits
from paycore.db.engine import Database
from paycore.invariants import books
from paycore.kit import ids
from paycore.kit.clock import now_us
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.payments import states as payment_states
from paycore.payouts import states as payout_states
from paycore.refunds import lifecycle as refund_lifecycle
from paycore.refunds import service as refunds
from paycore.refunds import states as refund_states
from tests.integration.invariants.test_invariants import every_check, metric, run_job
from tests.support import payouts as payout_support
from tests.support.refunds import create_refund, new_payment, open_merchant

TENANT = "acme"
NEW_CHECKS = {check.name for check in books.CHECKS}


def test_every_status_of_every_flow_has_its_expected_books() -> None:
    """EXPECTED names each domain's stored statuses exactly: a new status must say what its
    transfer looks like."""
    for table, states in (("payments", payment_states), ("refunds", refund_states), ("payouts", payout_states)):
        named = set(getattr(states, "STATUSES", ())) | {status for move in states.TRANSITIONS for status in move}
        assert set(books.EXPECTED[table]) == named, table


def a_business(database: Database) -> dict[str, Any]:
    """A payment with a succeeded and a pending refund, a payout in every status, a credit."""
    merchant = open_merchant(database, TENANT)
    payment_id = new_payment(database, TENANT, merchant, 10_000, now_us=now_us())
    succeeded = create_refund(database, TENANT, payment_id, 1_000, now_us=now_us())
    create_refund(database, TENANT, payment_id, 500, now_us=now_us())

    def succeed(connection: Connection) -> None:
        refund = refunds.MACHINE.load(connection, TENANT, succeeded, for_update=True)
        assert refund_lifecycle.move(connection, refund, "succeeded", cause="test", actor="local", now_us=now_us())

    database.transaction(succeed)
    source = payout_support.funded_source(database, TENANT, 1_000_000)
    payouts = {
        status: payout_support.move(
            database, payout_support.schedule(database, TENANT, source, 1_000), *payout_support.PATH_TO[status]
        )
        for status in payout_states.STATUSES
    }

    def credit(connection: Connection) -> str:
        return credits.create_credit(
            connection,
            TENANT,
            idempotency_key="welcome",
            lines=(credits.CreditLine("welcome", 700, "USD"),),
            enabled_currencies=frozenset({"USD"}),
            lines_max=10,
            now_us=now_us(),
        ).id

    return {
        "merchant": merchant,
        "payment": payment_id,
        "refund": succeeded,
        "payouts": payouts,
        "credit": database.transaction(credit),
    }


def tamper(database: Database, business: dict[str, Any]) -> None:
    """Each line breaks one flow's books behind its back, as bad SQL or a bug would."""
    scheduled = business["payouts"][payout_states.SCHEDULED]
    with database.engine.begin() as connection:
        # A succeeded payment set back to processing: its hold is posted, not pending.
        connection.execute(
            text("UPDATE payments SET status = 'processing' WHERE tenant_id = :t AND id = :id"),
            {"t": TENANT, "id": business["payment"]},
        )
        # A credit's amount edited: its transfer moved another amount.
        connection.execute(
            text("UPDATE credits SET amount_minor = amount_minor + 1 WHERE tenant_id = :t AND id = :id"),
            {"t": TENANT, "id": business["credit"]},
        )
        # A chargeback recorded as withdrawn whose withdrawal was never booked (SPEC §6.2).
        connection.execute(
            text(
                "INSERT INTO disputes (tenant_id, id, processor_dispute_id, payment_id, type, status, reason,"
                " amount_minor, currency, fee_minor, evidence_due_by_us, withdrawn_minor, reinstated_minor,"
                " withdrawal_transfer_id, reinstatement_transfer_id, created_at_us, updated_at_us)"
                " VALUES (:t, :id, 'dp_sbx_1', :p, 'chargeback', 'needs_response', 'fraudulent', 2000, 'USD', 1500,"
                " :at, 3500, 0, NULL, NULL, :at, :at)"
            ),
            {"t": TENANT, "id": DISPUTE_ID, "p": business["payment"], "at": now_us()},
        )

    def buggy_flows(connection: Connection) -> None:
        at = now_us()
        # The succeeded refund's post reversed, and the scheduled payout's hold voided, by their
        # own owners but without a status change: a flow's bug.
        refund_transfer = connection.execute(
            text("SELECT transfer_id FROM refunds WHERE tenant_id = :t AND id = :id"),
            {"t": TENANT, "id": business["refund"]},
        ).scalar_one()
        ledger.reverse_transfer(connection, TENANT, refund_transfer, now_us=at, owner_id=business["refund"])
        ledger.void_pending(connection, TENANT, scheduled.transfer_id, now_us=at, owner_id=scheduled.id)

    database.transaction(buggy_flows)
    unowned_transfer_on_clearing(database, business["merchant"])


def unowned_transfer_on_clearing(database: Database, merchant: str) -> None:
    """50.00 taken out of processor.clearing by a transfer no flow owns, written behind the
    triggers (PostgreSQL: replica mode; SQLite: the trigger dropped and made again, in one
    transaction)."""
    with database.read() as connection:
        clearing = ledger.find_account_by_code(connection, TENANT, chart.processor_clearing("USD"))
    assert clearing is not None
    transfer_id = ids.new_id("txn")
    with database.engine.begin() as connection:
        if database.is_postgres:
            connection.execute(text("SET LOCAL session_replication_role = replica"))
        else:
            trigger = connection.execute(
                text("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'ledger_entries_system_account'")
            ).scalar_one()
            connection.execute(text("DROP TRIGGER ledger_entries_system_account"))
        connection.execute(
            text(
                "INSERT INTO ledger_transfers (tenant_id, id, kind, reference_type, metadata, created_at_us)"
                " VALUES (:t, :id, 'transfer', 'adjustment', '{}', :at)"
            ),
            {"t": TENANT, "id": transfer_id, "at": now_us()},
        )
        for account, direction in ((clearing.id, "credit"), (merchant, "debit")):
            sequence = connection.execute(
                text(
                    "UPDATE ledger_accounts SET entries_count = entries_count + 1,"
                    f" {direction}s_posted_minor = {direction}s_posted_minor + 5000 WHERE tenant_id = :t AND id = :id"
                    " RETURNING entries_count"
                ),
                {"t": TENANT, "id": account},
            ).scalar_one()
            connection.execute(
                text(
                    "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor,"
                    " currency, account_sequence, created_at_us) VALUES (:t, :id, :transfer, :account, :direction,"
                    " 5000, 'USD', :sequence, :at)"
                ),
                {
                    "t": TENANT,
                    "id": ids.new_id("ent"),
                    "transfer": transfer_id,
                    "account": account,
                    "direction": direction,
                    "sequence": sequence,
                    "at": now_us(),
                },
            )
        if not database.is_postgres:
            connection.execute(text(trigger))


DISPUTE_ID = "dp_01JDTAMPERED0000000000000"
EXPECTED = {
    "payment_books_state": 1,  # set back to processing
    "refund_books_state": 1,  # its post reversed
    "payout_books_state": 1,  # its hold voided while scheduled
    "credit_books_state": 1,  # its amount edited
    "system_account_unowned": 1,  # the 50.00 out of clearing
    "dispute_books_state": 1,  # withdrawn by its row, not by the ledger
    # processor.clearing posted (the payment no longer counted as succeeded, the refund reversed,
    # the 50.00 taken), payouts.in_transit pending (the voided hold), credits.balance and
    # credits.issued posted (the edited amount)
    "system_account_balance": 4,
}


def test_a_clean_business_of_every_flow_has_books_that_match_its_states(
    client: TestClient, database: Database, settings: Settings
) -> None:
    a_business(database)
    run_job(database, Settings(database_url=settings.database_url, invariants_interval_ms=1))
    assert {name: count for name, count in every_check(client).items() if name in NEW_CHECKS} == dict.fromkeys(
        NEW_CHECKS, 0
    )
    assert verify(settings).returncode == 0


def test_each_tampered_flow_is_found_by_the_job_the_metrics_the_console_and_verify(
    client: TestClient, database: Database, settings: Settings
) -> None:
    assert set(EXPECTED) == NEW_CHECKS
    business = a_business(database)
    tamper(database, business)
    run_job(database, Settings(database_url=settings.database_url, invariants_interval_ms=1))
    assert {name: count for name, count in every_check(client).items() if name in NEW_CHECKS} == EXPECTED
    assert metric(client, "paycore_duplicate_money_movements_total") == 0

    with database.read() as connection:
        found = {
            (row.check_name, row.subject_id)
            for row in connection.execute(text("SELECT check_name, subject_id FROM invariant_violations"))
        }
    scheduled = business["payouts"][payout_states.SCHEDULED]
    for pair in (
        ("payment_books_state", business["payment"]),
        ("refund_books_state", business["refund"]),
        ("payout_books_state", scheduled.id),
        ("credit_books_state", business["credit"]),
        ("dispute_books_state", DISPUTE_ID),
    ):
        assert pair in found, (pair, found)

    page = client.get("/ops/invariants")
    assert page.status_code == 200, page.text
    for subject in (business["payment"], business["refund"], scheduled.id, business["credit"]):
        assert subject in page.text

    result = verify(settings)
    assert result.returncode == 1, result.stdout
    for name in EXPECTED:
        assert name in result.stdout, (name, result.stdout)
    assert business["payment"] in result.stdout and scheduled.id in result.stdout


def verify(settings: Settings) -> subprocess.CompletedProcess[str]:
    """`paycore ledger verify`, as an operator runs it."""
    env = {**os.environ, "PAYCORE_DATABASE_URL": settings.database_url, "COLUMNS": "400"}
    return subprocess.run(
        [str(Path(sys.executable).with_name("paycore")), "ledger", "verify"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
