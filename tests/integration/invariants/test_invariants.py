"""The money invariants, checked by a worker job (paycore.invariants, docs/invariants.md).

A clean database reports 0 for every check. Then the books are broken on purpose, behind
paycore's back, as an operator's bad SQL would: rows the services never write (a second posted
transfer for a payment and for a payout, refunds over their payment, an entry inserted with
the triggers off, an account's cached totals edited). The job finds each once: a row in
`invariant_violations`, an audit event, an ERROR log line, and `/metrics` moves.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection, text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.invariants import checks
from paycore.invariants import service as invariants
from paycore.kit import ids
from paycore.kit.clock import now_us
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.payments import service as payments
from paycore.payouts import states as payout_states
from paycore.processor.port import Processor
from paycore.refunds.models import refunds
from paycore.workers import jobs
from tests.support import payouts as payout_support
from tests.support import secrets_keys

TENANT = "acme"
LOGGER = "paycore.invariants.service"


def run_job(database: Database, settings: Settings, worker: str = "worker-1") -> int:
    """The worker's job, as `paycore worker` runs it."""
    context = jobs.WorkerContext(database, settings, cast(Processor, None), worker, secrets_keys.KEYRING)
    return jobs.check_invariants(context)


def metric(client: TestClient, name: str, check: str | None = None) -> int:
    body = client.get("/metrics").text
    label = "" if check is None else f'{{check="{check}"}}'
    found = re.search(rf"^{re.escape(name + label)} (\S+)$", body, re.MULTILINE)
    assert found is not None, f"{name}{label} missing from /metrics"
    value = found.group(1)
    assert value.endswith(".0"), value  # prometheus renders counts as N.0: never a fraction
    return int(value[:-2])


def every_check(client: TestClient) -> dict[str, int]:
    return {name: metric(client, "paycore_invariant_violations_total", name) for name in checks.NAMES}


def open_account(connection: Connection, code: str, normal: str = "credit") -> str:
    account = ledger.create_account(
        connection,
        TENANT,
        code=code,
        currency="USD",
        normal_balance=normal,
        no_overdraft=False,
        metadata={},
        now_us=now_us(),
    )
    return account.id


def a_clean_business(database: Database) -> dict[str, Any]:
    """A settled payment, a sent payout, an open hold and a plain transfer: all as paycore writes them."""

    def work(connection: Connection) -> dict[str, Any]:
        merchant = open_account(connection, "merchant")
        other = open_account(connection, "other")
        payment = payments.import_settled_payment(
            connection,
            TENANT,
            payment_id=ids.new_id("pay"),
            amount_minor=1_000,
            currency="USD",
            destination_account_id=merchant,
            now_us=now_us(),
        )
        ledger.create_transfer(
            connection,
            TENANT,
            TransferSpec((EntrySpec(merchant, "debit", 300), EntrySpec(other, "credit", 300)), pending=True),
            now_us=now_us(),
        )
        return {"merchant": merchant, "other": other, "payment": payment}

    found = database.transaction(work)
    source = payout_support.funded_source(database, TENANT, 10_000)
    payout = payout_support.schedule(database, TENANT, source, 2_000)
    payout = payout_support.move(database, payout, *payout_support.PATH_TO[payout_states.SENT])
    return {**found, "source": source, "payout": payout}


def test_a_clean_database_reports_zero_for_every_check(
    client: TestClient, database: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    a_clean_business(database)
    assert every_check(client) == dict.fromkeys(checks.NAMES, 0)  # listed before any run
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        checked = run_job(database, settings)
    assert checked > 0
    assert every_check(client) == dict.fromkeys(checks.NAMES, 0)
    assert metric(client, "paycore_duplicate_money_movements_total") == 0
    assert [r for r in caplog.records if getattr(r, "event", None) == "invariant_violation"] == []
    with database.read() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM invariant_violations")).scalar_one() == 0


def break_the_books(database: Database, business: dict[str, Any]) -> None:
    """What no paycore service writes: each line is an operator's bad SQL (or a bug). The two
    extra transfers are written as a buggy flow would: owned by the payment and the payout."""
    payment, payout = business["payment"], business["payout"]

    def work(connection: Connection) -> None:
        clearing = ledger.find_account_by_code(connection, TENANT, chart.processor_clearing("USD"))
        assert clearing is not None
        # The payment taken from the processor clearing account a second time.
        legs = (EntrySpec(clearing.id, "debit", 1_000), EntrySpec(business["merchant"], "credit", 1_000))
        spec = TransferSpec(legs, reference_type="payment", reference_id=payment.id, owner_id=payment.id)
        ledger.create_transfer(connection, TENANT, spec, now_us=now_us())
        # The payout's amount taken from its source a second time.
        in_transit = ledger.find_account_by_code(connection, TENANT, "payouts.in_transit.USD")
        assert in_transit is not None
        legs = (EntrySpec(business["source"], "debit", 2_000), EntrySpec(in_transit.id, "credit", 2_000))
        spec = TransferSpec(legs, reference_type="payout", reference_id=payout.id, owner_id=payout.id)
        ledger.create_transfer(connection, TENANT, spec, now_us=now_us())
        # Two refunds of the whole payment, inserted past the reservation on the payment row.
        for _ in range(2):
            connection.execute(refunds.insert().values(**refund_row(payment.id, 1_000)))
        # An account's cached totals edited: past 2^53 - 1, no longer its entries' sum.
        connection.execute(
            text("UPDATE ledger_accounts SET credits_posted_minor = :total WHERE tenant_id = :t AND id = :id"),
            {"total": AMOUNT_MINOR_MAX + 1, "t": TENANT, "id": business["other"]},
        )

    database.transaction(work)
    # One entry inserted alone, behind the triggers (PostgreSQL checks balance at commit).
    with database.engine.connect() as connection, connection.begin():
        if database.is_postgres:
            connection.execute(text("SET LOCAL session_replication_role = replica"))
        transfer_id = connection.execute(
            text("SELECT id FROM ledger_transfers WHERE tenant_id = :t ORDER BY id LIMIT 1"), {"t": TENANT}
        ).scalar_one()
        connection.execute(
            text(
                "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor,"
                " currency, account_sequence, created_at_us) VALUES (:t, :id, :transfer, :account, 'credit', 7,"
                " 'EUR', 1000, 0)"
            ),
            {"t": TENANT, "id": ids.new_id("ent"), "transfer": transfer_id, "account": business["merchant"]},
        )


def refund_row(payment_id: str, amount_minor: int) -> dict[str, Any]:
    refund_id = ids.new_id("rf")
    return {
        "tenant_id": TENANT,
        "id": refund_id,
        "payment_id": payment_id,
        "idempotency_key": None,
        "amount_minor": amount_minor,
        "currency": "USD",
        "reason": None,
        "status": "succeeded",
        "failure_code": None,
        "processor_request_id": refund_id,
        "processor_reference": None,
        "transfer_id": None,
        "attempts": 0,
        "next_attempt_at_us": None,
        "claimed_by": None,
        "claimed_until_us": None,
        "in_doubt_since_us": None,
        "created_at_us": now_us(),
        "updated_at_us": now_us(),
    }


EXPECTED = {
    "payment_charged_twice": 1,
    "payout_sent_twice": 1,
    "refund_over_payment": 1,
    "balance_over_max": 1,
    "account_totals_mismatch": 2,  # the edited account, and the account of the inserted entry
    "currency_sum_nonzero": 1,  # the edited totals (sums are over cached totals, per tenant and currency)
    "transfer_unbalanced": 1,
    "entry_currency_mismatch": 1,
    "entry_sequence_gap": 1,
    "hold_overposted": 0,
    # The books against the states: the two extra transfers are the payment's and the payout's
    # own (as a buggy flow would write them), so only the system accounts' sums see them:
    # processor.clearing and payouts.in_transit hold more than the flows' states say.
    "payment_books_state": 0,
    "refund_books_state": 0,
    "payout_books_state": 0,
    "credit_books_state": 0,
    "system_account_unowned": 0,
    "dispute_books_state": 0,  # no dispute in this business
    "system_account_balance": 2,
}


def test_broken_books_are_found_once_with_a_metric_an_audit_event_and_a_log_line(
    client: TestClient, database: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    assert set(EXPECTED) == set(checks.NAMES)
    business = a_clean_business(database)
    break_the_books(database, business)
    assert metric(client, "paycore_duplicate_money_movements_total") == 0  # not run yet
    fast = Settings(database_url=settings.database_url, invariants_interval_ms=1)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        run_job(database, fast)
    assert every_check(client) == EXPECTED
    assert metric(client, "paycore_duplicate_money_movements_total") == 2
    lines = [r for r in caplog.records if getattr(r, "event", None) == "invariant_violation"]
    assert sorted(r.__dict__["check"] for r in lines) == sorted(
        name for name, count in EXPECTED.items() for _ in range(count)
    )
    assert all(r.levelno == logging.ERROR for r in lines)
    charged = next(r for r in lines if r.__dict__["check"] == "payment_charged_twice")
    assert charged.__dict__["subject_id"] == business["payment"].id
    assert charged.__dict__["tenant_id"] == TENANT
    with database.read() as connection:
        events = connection.execute(
            text("SELECT cause, object_id FROM events WHERE type = 'invariant.violation' AND kind = 'note'")
        ).all()
    assert sorted(cause for cause, _ in events) == sorted(r.__dict__["check"] for r in lines)
    assert ("payout_sent_twice", business["payout"].id) in [tuple(event) for event in events]
    # Found once: a later run finds the same problems and records, logs and counts nothing new.
    time.sleep(0.01)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert run_job(database, fast) > 0
    assert [r for r in caplog.records if getattr(r, "event", None) == "invariant_violation"] == []
    assert every_check(client) == EXPECTED


def test_a_check_runs_at_most_once_per_interval_whichever_worker_asks(database: Database, settings: Settings) -> None:
    a_clean_business(database)
    budget = invariants.Budget(rows_max=1_000, interval_ms=3_600_000)
    first = invariants.run_due(database, budget, "worker-1")
    assert first.checks_run == len(checks.CHECKS)
    assert invariants.run_due(database, budget, "worker-2").checks_run == 0
    assert run_job(database, settings, "worker-3") == 0


def test_workers_running_at_once_run_each_check_once(database: Database) -> None:
    """No process lock: the cursor row's lock (SKIP LOCKED on PostgreSQL, SQLite's one
    writer) and its run time decide, so four workers at once run each check once in all."""
    a_clean_business(database)
    budget = invariants.Budget(rows_max=1_000, interval_ms=3_600_000)
    start = threading.Barrier(4)
    results: list[invariants.RunResult] = []

    def worker(number: int) -> None:
        start.wait()
        results.append(invariants.run_due(database, budget, f"worker-{number}"))

    threads = [threading.Thread(target=worker, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 4
    assert sum(result.checks_run for result in results) == len(checks.CHECKS)


def test_a_check_that_fails_is_logged_and_retried_an_interval_later_from_the_same_cursor(
    database: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    a_clean_business(database)
    broken = checks.CHECKS[0]
    monkeypatch.setattr(
        checks, "CHECKS", (dataclasses.replace(broken, sql="SELECT no_such_column FROM ledger_entries"),)
    )
    monkeypatch.setattr(invariants, "CHECKS", checks.CHECKS)
    budget = invariants.Budget(rows_max=1_000, interval_ms=3_600_000)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        result = invariants.run_due(database, budget, "worker-1")
    assert result.checks_run == 0
    failed = [r for r in caplog.records if getattr(r, "event", None) == "invariant_check_failed"]
    assert [r.__dict__["check"] for r in failed] == [broken.name]
    assert invariants.run_due(database, budget, "worker-2").checks_run == 0  # not due again yet
    with database.read() as connection:
        cursor = connection.execute(
            text("SELECT after_tenant_id, after_id FROM invariant_cursors WHERE check_name = :c"), {"c": broken.name}
        ).one()
    assert tuple(cursor) == ("", "")


def test_a_small_budget_covers_every_subject_over_successive_runs(database: Database) -> None:
    """One subject per check per run: the fourth of five accounts is found in the fourth run,
    and after the last the cursor starts again from the beginning."""

    def work(connection: Connection) -> list[str]:
        return [open_account(connection, f"a{number}") for number in range(5)]

    accounts = sorted(database.transaction(work))
    with database.engine.connect() as connection, connection.begin():
        connection.execute(
            text("UPDATE ledger_accounts SET credits_posted_minor = :total WHERE tenant_id = :t AND id = :id"),
            {"total": AMOUNT_MINOR_MAX + 1, "t": TENANT, "id": accounts[3]},
        )
    budget = invariants.Budget(rows_max=1, interval_ms=1)
    found_in_run = {}
    for run in range(1, 8):
        time.sleep(0.002)
        result = invariants.run_due(database, budget, "worker-1")
        assert result.subjects_checked <= len(checks.CHECKS)  # at most rows_max per check
        for finding in result.found:
            if finding.check == "balance_over_max":
                found_in_run[finding.subject_id] = run
    assert found_in_run == {accounts[3]: 4}


def test_worker_once_prints_the_jobs_result(database: Database, settings: Settings) -> None:
    from typer.testing import CliRunner

    from paycore.cli.main import app

    a_clean_business(database)
    env = {"PAYCORE_DATABASE_URL": settings.database_url, "COLUMNS": "250"}
    result = CliRunner().invoke(app, ["worker", "--once"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    printed = re.search(r"'check_invariants': (\d+)", result.output)
    assert printed is not None, result.output
    assert int(printed.group(1)) > 0


def test_a_clients_transfer_naming_a_payout_is_not_the_payout_sent_twice(
    client: TestClient, database: Database, settings: Settings
) -> None:
    """Only the payout's own transfers count: a tenant moving money out of its payout's source
    with a transfer that names the payout as its reference is moving its own money, and must
    not page anyone as a duplicate money movement."""
    business = a_clean_business(database)
    payout = business["payout"]

    def the_clients(connection: Connection) -> None:
        legs = (EntrySpec(business["source"], "debit", 2_000), EntrySpec(business["other"], "credit", 2_000))
        spec = TransferSpec(legs, reference_type="payout", reference_id=payout.id)  # no owner: the tenant's
        ledger.create_transfer(connection, TENANT, spec, now_us=now_us())

    database.transaction(the_clients)
    run_job(database, Settings(database_url=settings.database_url, invariants_interval_ms=1))
    assert metric(client, "paycore_invariant_violations_total", "payout_sent_twice") == 0
    assert metric(client, "paycore_duplicate_money_movements_total") == 0
