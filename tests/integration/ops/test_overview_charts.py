"""The overview's charts on both databases (`reports.activity` through `operations.overview`
and `/ops`): what the API made, counted in the current hour and day; and rows written at set
times around a midnight that is also a new year's, read with the clock injected (`now_us`):
each in its own hour and day, the levels counted back from the events, a tenant's view its own.

The rows of the second part are written directly (every column a service writes, with the
times a test needs; the events as the services record them), as `bench/_console_fixture.py`
does: the services take the clock of the moment they run."""

from __future__ import annotations

import pytest

from paycore.audit.models import events
from paycore.db.engine import Database
from paycore.kit.clock import now_us, parse_rfc3339
from paycore.monitoring import service as operations
from paycore.payments.models import payments
from paycore.payouts.models import payouts
from paycore.reconciliation.models import reconciliation_breaks
from paycore.refunds.models import refunds
from tests.integration.ops.conftest import Console
from tests.integration.ops.overview_support import at, event, payment, row, write

NOW = parse_rfc3339("2030-01-01T00:30:00Z")  # half an hour into a new day, month and year
SCHEDULES = operations.Schedules(invariants_interval_ms=60_000, reconcile_delay_ms=0, reconcile_lookback_days=1)


def around_midnight(database: Database) -> None:
    """acme's payments, refund, payout, in-doubt story and breaks either side of 2030's first
    midnight; globex's one EUR payment; the window's edges."""
    doubted = payment("acme", "2029-12-31T23:59:59.999999Z", "succeeded", 100_000)  # 1,000.00 USD
    write(
        database,
        payments,
        doubted,
        payment("acme", "2030-01-01T00:00:00Z", "failed", 700),
        payment("acme", "2029-12-31T00:59:59Z", "succeeded", 300),  # before the 24 hours, in the days
        payment("acme", "2029-12-03T00:00:00Z", "succeeded", 5),  # the 30 days' first microsecond
        payment("acme", "2029-12-02T23:59:59.999999Z", "succeeded", 9),  # before the 30 days: left out
        payment("globex", "2030-01-01T00:10:00Z", "succeeded", 4_200, "EUR"),
    )
    created = at("2029-12-31T23:30:00Z")
    refund = row(refunds, tenant_id="acme", payment_id=doubted["id"], currency="USD", created_at_us=created)
    write(database, refunds, {**refund, "amount_minor": 2_500, "status": "succeeded", "updated_at_us": created})
    payout = row(payouts, tenant_id="acme", amount_minor=50_000, currency="USD", rail="ach", status="sent")
    sent = at("2030-01-01T00:05:00Z")
    write(database, payouts, {**payout, "account_number": "000123456789", "sent_at_us": sent, "updated_at_us": sent})
    opened = row(reconciliation_breaks, tenant_id="acme", status="open", finding_key="f1")
    resolved = row(reconciliation_breaks, tenant_id="acme", status="resolved", finding_key="f2")
    write(database, reconciliation_breaks, opened, resolved)
    write(
        database,
        events,
        event(
            "acme",
            "2029-12-31T23:59:59.999999Z",
            "payment",
            doubted["id"],
            from_state="processing",
            to_state="in_doubt",
        ),
        event("acme", "2030-01-01T00:00:00Z", "payment", doubted["id"], from_state="in_doubt", to_state="succeeded"),
        event("acme", "2029-12-31T23:00:00Z", "payment", opened["id"], kind="note", type="reconciliation.break_opened"),
        event(
            "acme", "2029-12-30T10:00:00Z", "payment", resolved["id"], kind="note", type="reconciliation.break_opened"
        ),
        event(
            "acme", "2030-01-01T00:10:00Z", "payment", resolved["id"], kind="note", type="reconciliation.break_resolved"
        ),
        event("acme", "2029-12-31T22:00:00Z", "payment", "other", from_state="processing", to_state="succeeded"),
    )


def test_rows_either_side_of_midnight_are_in_their_own_hour_and_day(database: Database) -> None:
    around_midnight(database)
    with database.read() as connection:
        hours, days = operations.overview(connection, SCHEDULES, tenant_id="acme", now_us=NOW).activity
    assert hours.by_status["succeeded"][-2:] == [1, 0] and hours.by_status["failed"][-2:] == [0, 1]
    assert sum(hours.by_status["succeeded"]) == 1  # 00:59:59 the day before is 24 hours and a second ago
    assert days.by_status["succeeded"][-2:] == [2, 0] and days.by_status["failed"][-1] == 1
    assert days.by_status["succeeded"][0] == 1 and sum(days.by_status["succeeded"]) == 3  # the 9 is out
    assert days.success_per_mille[-2:] == [1000, 0] and days.success_per_mille[1] is None
    assert hours.money_in == {"USD": [0] * 22 + [100_000, 0]}
    assert days.money_in == {"USD": [5] + [0] * 27 + [100_300, 0]}
    assert days.money_out == {"USD": [0] * 28 + [2_500, 50_000]}  # the refund yesterday, the payout today
    assert hours.money_out["USD"][-2:] == [2_500, 50_000]
    # In doubt from the last microsecond of 2029 to the first of 2030: one at the old year's end.
    assert hours.in_doubt["payment"][-3:] == [0, 1, 0] and days.in_doubt["payment"][-2:] == [1, 0]
    assert days.in_doubt["refund"] == [0] * 30
    # Breaks: one opened 2029-12-30 and resolved at 00:10, one opened at 23:00 and open now.
    assert hours.open_breaks[-3:] == [1, 2, 1] and hours.open_breaks[0] == 1
    assert days.open_breaks[-4:] == [0, 1, 2, 1]


def test_a_tenants_view_is_its_own_and_the_platforms_is_everyones(database: Database) -> None:
    around_midnight(database)
    with database.read() as connection:
        everyone = operations.overview(connection, SCHEDULES, tenant_id=None, now_us=NOW).activity
        globex = operations.overview(connection, SCHEDULES, tenant_id="globex", now_us=NOW).activity
    assert everyone[0].money_in == {"USD": [0] * 22 + [100_000, 0], "EUR": [0] * 23 + [4_200]}
    assert everyone[1].by_status["succeeded"][-1] == 1
    assert globex[1].by_status == {"succeeded": [0] * 29 + [1]} and globex[1].money_out == {}
    assert globex[0].open_breaks == [0] * 24 and globex[0].in_doubt["payment"] == [0] * 24


def test_as_the_clock_moves_on_so_do_the_windows(database: Database) -> None:
    around_midnight(database)
    with database.read() as connection:
        last = at("2030-01-01T23:59:59.999999Z")  # the day's last microsecond: its 24 hours from 00:00
        hours, days = operations.overview(connection, SCHEDULES, tenant_id="acme", now_us=last).activity
        assert hours.by_status == {"failed": [1] + [0] * 23} and days.by_status["failed"][-1] == 1
        following = at("2030-01-02T00:00:00Z")  # the next midnight: a new day, 01:00 the 24 hours' first
        hours, days = operations.overview(connection, SCHEDULES, tenant_id="acme", now_us=following).activity
    assert hours.by_status == {}
    assert days.by_status["failed"][-2:] == [1, 0] and days.by_status["succeeded"][-3:] == [2, 0, 0]


def test_the_page_draws_both_windows(console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    around_midnight(console.env.database)
    monkeypatch.setattr("paycore.http.console.pages.now_us", lambda: NOW)
    page = console.signed_in("alice").get("/ops")
    assert page.status_code == 200, page.text
    html = page.text
    assert html.count('<svg class="chart"') == 12  # six charts (USD and EUR) for each window
    assert '<td>2029-12-31 23:00</td><td class="num">1</td>' in html  # the hours' table: succeeded
    assert '<td>2030-01-01</td><td class="num">1</td><td class="num">1</td>' in html  # the days': failed, succeeded
    assert "1,000.00 USD" in html and "42.00 EUR" in html and "500.00 USD" in html


def test_what_the_api_made_is_in_the_current_hour_and_day(console: Console) -> None:
    env = console.env
    merchant = env.account()
    for amount_minor in (123_456, 1_000):
        assert env.pay(merchant, amount_minor=amount_minor).json()["status"] == "succeeded"
    assert env.pay(merchant, token="tok_declined").json()["status"] == "failed"
    env.faults({"fault": "drop_response", "next_n": 1})
    assert env.pay(merchant).json()["status"] == "in_doubt"
    with env.database.read() as connection:
        found = operations.overview(connection, SCHEDULES, tenant_id=None, now_us=now_us())
    for window in found.activity:  # an hour may turn between the payments and the read: sums
        totals = {status: sum(values) for status, values in window.by_status.items()}
        assert totals == {"succeeded": 2, "failed": 1, "in_doubt": 1}, totals
        assert {currency: sum(values) for currency, values in window.money_in.items()} == {"USD": 124_456}
        assert window.in_doubt["payment"][-1] == 1 and window.in_doubt["payment"][0] == 0  # the real event
        assert window.success_per_mille.count(None) >= window.window.buckets - 2
    page = console.signed_in("alice").get("/ops")
    assert "1,244.56 USD" in page.text and "4 in all" in page.text and "66.6%" in page.text
