"""Issue 31: the set-based match (`reconciliation.staging`) decides exactly what judging every
line one by one decides, on both databases, for a report of many chunks.

One database holds every case a line can meet (payments succeeded, declined and in doubt;
authorizations captured in part, captured in doubt, open; refunds succeeded and in doubt; a
payout settled by the bank; a payout the report settles and returns; chargebacks recorded, one
won, one whose withdrawal line is wrong, one paycore never heard of), and is copied whole. The
same report, in chunks far smaller than in production
(50 lines, then up to 200) so that it spans many of them, is reconciled on the original with the
engine as it is, and on the copy with every line judged one by one (`staging.unsettled` returning
every first line and no fee recorded set-based: the engine before issue 31). Then again (a
re-run changes nothing), then a corrected report. After each: the same summary, the same breaks
(finding, object, line, detail, status), the same objects' statuses and the same ledger balances.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Connection, text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.ledger.verify import verify
from paycore.reconciliation import chunks, staging
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.report import HEADER, Staged
from paycore.tenants import service as tenants
from tests.integration.disputes import support as disputes
from tests.integration.payments import capture_support
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support as payouts
from tests.integration.reconciliation.test_engine import report_of_days
from tests.integration.reconciliation.test_reconcile import changed, paid, today
from tests.integration.refunds import support as refunds
from tests.support import databases
from tests.support.payouts import funded_source

FILLER_LINES = 1_500  # lines about objects paycore never made, between the real ones


@pytest.fixture
def transport() -> str:
    return "inprocess"


def scenario(env: Env) -> list[str]:
    """Every kind of object a line can name, and the day's report of them (its header first)."""
    wrong_dispute = chargebacks(env)  # first: their webhooks are delivered, no other item's must be
    succeeded = [paid(env, amount_minor=1000 + index) for index in range(6)]
    declined = [paid(env, token="tok_declined", amount_minor=700 + index) for index in range(2)]
    env.faults({"fault": "drop_response", "next_n": 3, "ops": ["charge"]})
    in_doubt = [paid(env, amount_minor=3000 + index) for index in range(3)]
    refunded = refunds.created(env, succeeded[0]["id"], 400)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["refund"]})
    refunds.created(env, succeeded[1]["id"], 300)
    refunds.send(env)
    assert refunded["id"] and all(payment["status"] == "in_doubt" for payment in in_doubt)
    manual = authorizations(env)
    source = funded_source(env.database, payouts.TENANT, 20_000)
    payouts.schedule(env, payouts.ach(source))
    payouts.schedule(env, payouts.ach(source, account_number=payouts.RETURNED_R02))
    assert payouts.queue_and_send(env) == 2
    payouts.bank_finishes(env, deliver=False)
    lines = report_of_days(env)
    for tenant_id in sorted({"default", payouts.TENANT}):  # out of local mode: a merchant may be no tenant
        env.database.transaction(partial(make_tenant, tenant_id=tenant_id))
    wrong = changed(lines, succeeded[2]["id"], amount_minor="999")  # amount_mismatch
    wrong = changed(wrong, succeeded[3]["id"], currency="EUR")  # currency_mismatch
    wrong = changed(wrong, declined[0]["id"], status="succeeded")  # status_mismatch
    wrong = changed(wrong, in_doubt[2]["id"], status="pending")  # nothing proved yet
    wrong = changed(wrong, manual["wrong"], amount_minor="1999")  # a capture's amount_mismatch
    wrong = changed(wrong, manual["pending"], status="pending")  # a manual payment's line: captures only
    forged = [text.replace(manual["partial"], manual["open"]) for text in wrong if manual["partial"] in text]
    wrong = [withdrawn(text, "1") if wrong_dispute in text else text for text in wrong]  # a dispute's amount_mismatch
    dropped = succeeded[4]["id"]  # missing_at_processor
    return [text for text in wrong + forged if text.split(",")[1] != dropped]


def chargebacks(env: Env) -> str:
    """tok_disputed payments charged back and recorded (the first won), and a chargeback whose
    webhook never reaches paycore (its lines: missing_in_paycore); the processor's id of a
    recorded one (its withdrawal line is made wrong)."""
    merchant = env.account("merchant.disputed")
    recorded = [disputes.paid(env, merchant, 4000 + index, token="tok_disputed") for index in range(3)]
    unknown = disputes.paid(env, merchant, 4500)
    opened_at = disputes.later()
    assert env.sandbox.settle_due(opened_at) >= 3 and env.deliver(opened_at) >= 3
    disputes.open_at_sandbox(env, unknown)
    disputes.caught(env)
    won, wrong = (env.sandbox.disputes_of_charge(payment["id"])[0].dispute_id for payment in recorded[:2])
    disputes.evidence_at_sandbox(env, won, "winning_evidence")
    decided_at = disputes.later() + disputes.LATER_US
    env.sandbox.settle_due(decided_at)
    assert env.deliver(decided_at) >= 2
    return wrong


def withdrawn(text: str, amount_minor: str) -> str:
    """A dispute's withdrawal line with another amount (any other line as it is)."""
    fields = text.split(",")
    if fields[0] != "dispute_withdrawal":
        return text
    fields[HEADER.index("amount_minor")] = amount_minor
    return ",".join(fields)


def authorizations(env: Env) -> dict[str, str]:
    """Manual payments (SPEC §6.1): captured in part, captured in doubt, captured (its line made
    wrong, or pending), and one left open (a capture line forged for it): by role, their ids."""
    merchant = env.account("merchant.manual")
    made = {role: capture_support.authorized(env, merchant, 5000)["id"] for role in _ROLES}
    for role in ("partial", "wrong", "pending"):
        assert capture_support.capture(env, made[role], 2000).status_code == 200
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["capture"]})
    assert capture_support.capture(env, made["in_doubt"], 3000).status_code == 202
    return made


_ROLES = ("partial", "in_doubt", "wrong", "pending", "open")


def make_tenant(connection: Connection, *, tenant_id: str) -> None:
    tenants.create_tenant(connection, tenant_id, now_us=now_us())


def spread(lines: list[str]) -> list[str]:
    """The report's lines spread over many chunks, among lines about nothing paycore made
    (failed and pending charges: matched; succeeded ones: missing_in_paycore), with duplicates
    in the same chunk and in later ones, malformed lines and a merchant that is no tenant."""
    header, real = lines[0], lines[1:]
    out = [header]
    step = max(1, FILLER_LINES // (len(real) + 1))
    placed = 0
    for number in range(FILLER_LINES):
        status = ("failed", "pending", "succeeded", "failed")[number % 4] if number % 97 else "succeeded"
        merchant = "default" if number % 211 else ("nobody-here", "Default")[number % 2]
        out.append(
            f"charge,pay_F{number:05d},ch_F{number:05d},{merchant},1000,30,USD,{status},{today()}T10:00:00Z,,\r\n"
        )
        if number % 401 == 7:
            out.append(f"charge,pay_M{number},ch_M{number},default,12.5,0,USD,succeeded,{today()}T10:00:00Z,,\r\n")
        if number % step == 0 and placed < len(real):
            out.append(real[placed])
            if placed % 3 == 0:
                out.append(real[placed])  # a duplicate in the same chunk
            placed += 1
    out += real[placed:]
    out += real[::2]  # duplicates in a later chunk
    return out


@contextlib.contextmanager
def copied(database_url: str, database: Database) -> Iterator[Database]:
    """A copy of the database as it is now (the original's connections are closed first)."""
    database.dispose()
    if database_url.startswith("sqlite"):
        source_path = database_url.removeprefix("sqlite:///")
        target_path = source_path + ".copy.db"
        with (
            contextlib.closing(sqlite3.connect(source_path)) as source,
            contextlib.closing(sqlite3.connect(target_path)) as target,
        ):
            source.backup(target)
        copy = Database(Settings(database_url=f"sqlite:///{target_path}"))
        yield copy
        copy.dispose()
        return
    name = database_url.rsplit("/", 1)[1]
    copy_name = f"{name}_copy"
    with psycopg.connect(databases.ADMIN_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(copy_name), sql.Identifier(name)))
    copy = Database(Settings(database_url=databases.sqlalchemy_url(copy_name)))
    try:
        yield copy
    finally:
        copy.dispose()
        databases.PostgresDatabases.drop(copy_name)


def every_line_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine before issue 31: every line seen first judged one by one, no fee set-based."""

    def unsettled(connection: Connection, run_id: str) -> list[Staged]:
        query = (
            f"SELECT {staging._LINE_COLUMNS} FROM {staging.TABLE} l {staging._FIRST} "
            "WHERE s.line_number = l.line_number ORDER BY l.line_number"
        )
        return staging._fetch(connection, query, [run_id])

    monkeypatch.setattr(staging, "unsettled", unsettled)
    monkeypatch.setattr(staging, "record_plain_fees", lambda connection, run_id, now_us: [])


def outcome(database: Database, summary: reconciliation.Summary) -> dict[str, Any]:
    """What a run decided, without the ids that differ from one database to the other."""
    with database.read() as connection:
        assert verify(connection).ok
        breaks = connection.execute(
            text(
                "SELECT tenant_id, type, status, finding_key, object_type, object_id, object_status, line_number, "
                "line, detail FROM reconciliation_breaks ORDER BY tenant_id, finding_key, status"
            )
        ).all()
        objects = [
            connection.execute(text(f"SELECT tenant_id, id, status FROM {table} ORDER BY tenant_id, id")).all()
            for table in ("payments", "refunds", "payouts")
        ]
        balances = connection.execute(
            text(
                "SELECT tenant_id, code, currency, debits_posted_minor, credits_posted_minor, debits_pending_minor, "
                "credits_pending_minor FROM ledger_accounts ORDER BY tenant_id, code, currency"
            )
        ).all()
        fees = connection.execute(
            text("SELECT tenant_id, object_type, object_id, fee_minor FROM reconciliation_fees ORDER BY 1, 2, 3")
        ).all()
    counts = (summary.lines_read, summary.matched, dict(+summary.breaks), summary.resolved, summary.fees_booked)
    return {
        "counts": (*counts, dict(+summary.fees_minor), summary.superseded),
        "breaks": [tuple(row) for row in breaks],
        "objects": [[tuple(row) for row in rows] for rows in objects],
        "balances": [tuple(row) for row in balances],
        "fees": [tuple(row) for row in fees],
    }


def test_the_set_based_match_decides_what_judging_every_line_decides(
    env: Env, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = spread(scenario(env))
    assert len(lines) > 7 * 200 and lines[0].startswith(",".join(HEADER))
    corrected = changed(lines, lines[-1].split(",")[1], fee_minor="1")  # a fee booked before at another amount
    monkeypatch.setattr(reconciliation, "CHUNK_LINES", 50)
    monkeypatch.setattr(reconciliation, "CHUNK_LINES_MAX", 200)
    monkeypatch.setattr(chunks, "JUDGED_LINES_MAX", 7)
    with copied(database_url, env.database) as reference:
        set_based = [
            outcome(env.database, reconciliation.reconcile(env.database, report, day=today(), grace_ms=0))
            for report in (lines, lines, corrected)
        ]
        with monkeypatch.context() as patched:
            every_line_judged(patched)
            one_by_one = [
                outcome(reference, reconciliation.reconcile(reference, report, day=today(), grace_ms=0))
                for report in (lines, lines, corrected)
            ]

    for step, (got, want) in enumerate(zip(set_based, one_by_one, strict=True)):
        for part in want:
            assert got[part] == want[part], (step, part)
    first, again, _ = set_based
    assert first["counts"][3] >= 4 and first["counts"][4] > 0  # items resolved, fees booked
    breaks_found = first["counts"][2]
    assert {"amount_mismatch", "currency_mismatch", "status_mismatch", "duplicate_line"} <= set(breaks_found)
    assert {"missing_in_paycore", "missing_at_processor", "malformed_line", "unknown_account"} <= set(breaks_found)
    assert {row[1] for row in first["breaks"] if row[4] == "dispute"} == {"amount_mismatch"}
    of_disputes = Counter(row[1] for row in first["breaks"] if "dispute" in row[9])  # lines, detail
    assert (of_disputes["missing_in_paycore"], of_disputes["duplicate_line"] > 0) == (2, True)
    assert (again["counts"][2], again["counts"][3], again["counts"][4], again["counts"][6]) == ({}, 0, 0, 0)
