"""Captures in the settlement report (SPEC §6.1, issue 40 point 4), through the real
reconciliation and the real sandbox, on both databases: the report lists captures (a `charge`
line of the captured amount), not authorizations. A partial capture reconciles clean against
what was captured; a capture the report shows with another amount is an `amount_mismatch`; a
capture whose answer was lost is resolved by its line through the payment's lifecycle, once;
an authorization with no capture sent is never moved by the report; and no capture line in the
complete reports of every day through an in-doubt capture's expiry is the processor's word that it
expired (SPEC §6.1; the cases around it: test_expiry_from_reports.py)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from sqlalchemy import text

from paycore.kit.clock import DAY_US
from paycore.ledger.verify import verify
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.service import CAUSE
from tests.integration.payments.capture_support import authorized, capture, history, money, payment
from tests.integration.payments.conftest import Env


@pytest.fixture
def transport() -> str:
    return "inprocess"


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def report(env: Env) -> list[str]:
    return list(env.processor.settlement_report(today()))


def capture_lines(lines: list[str], payment_id: str) -> list[list[str]]:
    return [fields for fields in (line.split(",") for line in lines) if fields[1] == payment_id]


def test_a_partial_capture_reconciles_clean_against_what_was_captured(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    assert capture(env, paid["id"], 2000).status_code == 200
    lines = report(env)
    assert [(fields[0], fields[4], fields[7]) for fields in capture_lines(lines, paid["id"])] == [
        ("charge", "2000", "succeeded")
    ]

    summary = reconciliation.reconcile(env.database, lines)

    assert (summary.matched, summary.resolved, dict(summary.breaks)) == (1, 0, {})
    again = reconciliation.reconcile(env.database, lines)  # the fee booked once; nothing new
    assert (again.matched, dict(again.breaks)) == (1, {})
    with env.database.read() as connection:
        assert verify(connection).ok


def test_an_open_authorization_has_no_line_and_no_break(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    lines = report(env)
    assert capture_lines(lines, paid["id"]) == []  # the report lists captures, not authorizations

    summary = reconciliation.reconcile(env.database, lines, day=today())

    assert dict(summary.breaks) == {}
    assert payment(env, paid["id"])["status"] == "requires_capture"


def test_a_capture_the_report_shows_with_another_amount_is_an_amount_mismatch(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "report_amount_delta", "amount_delta_minor": 100, "next_n": 1, "ops": ["charge"]})
    paid = authorized(env, merchant, 5000)
    assert capture(env, paid["id"], 2000).status_code == 200

    summary = reconciliation.reconcile(env.database, report(env))

    assert dict(summary.breaks) == {"amount_mismatch": 1}
    found = env.client.get("/v1/reconciliation/breaks", params={"type": "amount_mismatch"}).json()["data"]
    assert [(item["object_id"], item["object_status"], item["detail"]) for item in found] == [
        (paid["id"], "succeeded", "report 2100, paycore 2000")
    ]
    assert payment(env, paid["id"])["amount_captured_minor"] == 2000  # a line that disagrees proves nothing


def test_an_in_doubt_capture_is_resolved_by_its_line_through_the_lifecycle(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["capture"]})
    response = capture(env, paid["id"], 3000)
    assert (response.status_code, response.json()["in_doubt_operation"]) == (202, "capture")
    assert money(env, merchant) == (0, 5000)

    summary = reconciliation.reconcile(env.database, report(env))

    assert (summary.resolved, dict(summary.breaks)) == (1, {})
    body = payment(env, paid["id"])
    assert (body["status"], body["amount_captured_minor"], body["in_doubt_operation"]) == ("succeeded", 3000, None)
    assert history(env, paid["id"])[-1] == ("in_doubt", "succeeded", CAUSE)
    assert money(env, merchant) == (3000, 0)  # captured posted, the rest released, in one step
    env.resolve()
    env.deliver()  # the resolver and the charge.captured webhook find it settled: moved once
    assert money(env, merchant) == (3000, 0)
    assert history(env, paid["id"])[-1] == ("in_doubt", "succeeded", CAUSE)
    with env.database.read() as connection:
        assert verify(connection).ok


def test_an_in_doubt_capture_whose_line_shows_another_amount_stays_in_doubt(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "report_amount_delta", "amount_delta_minor": -500, "next_n": 1, "ops": ["charge"]})
    paid = authorized(env, merchant, 5000)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["capture"]})
    assert capture(env, paid["id"], 3000).status_code == 202

    summary = reconciliation.reconcile(env.database, report(env))

    assert (summary.resolved, dict(summary.breaks)) == (0, {"amount_mismatch": 1})
    assert payment(env, paid["id"])["status"] == "in_doubt"  # the status query settles it, not the line
    env.resolve()
    assert payment(env, paid["id"])["amount_captured_minor"] == 3000


def test_a_capture_line_for_an_authorization_paycore_sent_no_capture_for_is_a_status_mismatch(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    assert capture(env, paid["id"], 2000).status_code == 200
    lines = report(env)
    # As if the processor captured an authorization paycore holds as open (the line of another day's report).
    other = authorized(env, merchant, 5000)
    forged = [line.replace(paid["id"], other["id"]) if paid["id"] in line else line for line in lines]

    summary = reconciliation.reconcile(env.database, forged)

    assert dict(summary.breaks) == {"status_mismatch": 1}
    assert payment(env, other["id"])["status"] == "requires_capture"
    assert money(env, merchant) == (2000, 5000)


def test_no_capture_line_in_the_complete_reports_through_its_expiry_resolves_it_expired(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 4000, token="tok_expires_quickly")
    env.faults({"fault": "drop_request", "next_n": 1, "ops": ["capture"]})
    assert capture(env, paid["id"]).json()["in_doubt_operation"] == "capture"
    time.sleep(2.2)  # the capture never arrived, and the authorization's lifetime ends
    lines = report(env)
    assert capture_lines(lines, paid["id"]) == []

    partial_day = reconciliation.reconcile(env.database, lines, source="processor", day=today())

    # Today's report is not complete yet (the day is not over): no evidence of an expiry.
    assert (partial_day.resolved, dict(partial_day.breaks)) == (0, {})
    assert payment(env, paid["id"])["status"] == "in_doubt"
    assert money(env, merchant) == (0, 4000)

    yesterday = made_yesterday(env, paid["id"])  # its whole life in a day whose report is complete
    summary = reconciliation.reconcile(env.database, report_of(env, yesterday), source="processor", day=yesterday)

    assert (summary.resolved, dict(summary.breaks)) == (1, {})
    body = payment(env, paid["id"])
    assert (body["status"], body["cancellation_reason"], body["in_doubt_operation"]) == ("canceled", "expired", None)
    assert history(env, paid["id"])[-1] == ("in_doubt", "canceled", CAUSE)
    assert money(env, merchant) == (0, 0)  # the hold released
    again = reconciliation.reconcile(env.database, report_of(env, yesterday), source="processor", day=yesterday)
    assert (again.resolved, dict(again.breaks)) == (0, {})
    env.resolve()  # the processor's word agrees (expired): nothing moves twice
    env.deliver()
    assert history(env, paid["id"])[-1] == ("in_doubt", "canceled", CAUSE)
    assert money(env, merchant) == (0, 0)
    with env.database.read() as connection:
        assert verify(connection).ok


def report_of(env: Env, day: str) -> list[str]:
    return list(env.processor.settlement_report(day))


def made_yesterday(env: Env, payment_id: str) -> str:
    """Move the payment's authorization (its making and its expiry, 2 s apart as the sandbox's)
    to yesterday's noon: real SQL, as the clock would have done. Returns yesterday."""
    day = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    noon_us = (day - dt.date(1970, 1, 1)).days * DAY_US + DAY_US // 2
    with env.database.engine.connect() as connection, connection.begin():
        moved = connection.execute(
            text(
                "UPDATE payments SET created_at_us = :made_us, "
                "authorization_expires_at_us = :made_us + (authorization_expires_at_us - created_at_us) WHERE id = :id"
            ),
            {"made_us": noon_us, "id": payment_id},
        )
        assert moved.rowcount == 1
    return day.isoformat()


def authorized_yesterday(env: Env, merchant: str) -> dict[str, Any]:
    """An authorization made a day ago (its payment's creation moved back: real SQL, as the
    clock would have done; the sandbox's capture line is dated by the capture, today)."""
    paid = authorized(env, merchant, 5000)
    with env.database.engine.connect() as connection, connection.begin():
        moved = connection.execute(
            text("UPDATE payments SET created_at_us = created_at_us - :by_us WHERE id = :id"),
            {"by_us": DAY_US, "id": paid["id"]},
        )
        assert moved.rowcount == 1
    return paid


def test_a_capture_is_looked_for_on_the_day_it_was_captured_not_authorized(env: Env) -> None:
    merchant = env.account()
    paid = authorized_yesterday(env, merchant)
    assert capture(env, paid["id"], 2000).status_code == 200
    header = report(env)[0]
    yesterday = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat()

    authorized_on = reconciliation.reconcile(env.database, [header], day=yesterday, grace_ms=0)
    captured_on = reconciliation.reconcile(env.database, report(env), grace_ms=0)

    assert dict(authorized_on.breaks) == {}  # its line is in the capture's day's report
    assert (captured_on.matched, dict(captured_on.breaks)) == (1, {})


def test_a_capture_the_report_leaves_out_is_missing_at_processor_on_its_day(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "report_drop_line", "next_n": 1, "ops": ["charge"]})
    paid = authorized_yesterday(env, merchant)
    assert capture(env, paid["id"], 2000).status_code == 200
    lines = report(env)
    assert capture_lines(lines, paid["id"]) == []

    summary = reconciliation.reconcile(env.database, lines, day=today(), grace_ms=0)

    assert dict(summary.breaks) == {"missing_at_processor": 1}
    found = env.client.get("/v1/reconciliation/breaks", params={"type": "missing_at_processor"}).json()["data"]
    assert [(item["object_id"], item["object_status"]) for item in found] == [(paid["id"], "succeeded")]
