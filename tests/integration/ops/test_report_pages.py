"""The console's report pages (issue 28): /ops/losses with its SVG charts and its CSV,
/ops/ledger and an account's statement, /ops/webhooks, /ops/audit. Local mode (no key, no
operator: the pages open without signing in, every tenant visible), on SQLite and PostgreSQL;
the loss report's fixture set (tests/integration/reports/world.py) for the money."""

from __future__ import annotations

import csv
import html
import io
import re
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paycore.db.engine import Database
from paycore.http.console import losses as loss_pages
from paycore.kit.clock import now_us
from paycore.operators import service as operators
from paycore.payouts import service as payout_service
from paycore.reports import charts, losses
from paycore.reports.charts import slot_of
from paycore.tenants import service as tenants
from paycore.webhooks import rounds
from tests.integration.http.test_ledger import create_account, moved
from tests.integration.ops.conftest import csrf_of
from tests.integration.reports import expected
from tests.integration.reports.conftest import ids
from tests.integration.reports.expected import with_ids
from tests.support import payouts as payout_support
from tests.support import secrets_keys

__all__ = ["ids"]
_NEXT = re.compile(r'rel="next" href="([^"]+)"')
_ROW_PAYOUT = re.compile(r'<td><a href="/ops/payouts/([^"]+)">')


def page(client: TestClient, path: str, expect: int = 200, /, **params: Any) -> str:
    response = client.get(path, params=params or None)  # an empty mapping would drop the path's query
    assert response.status_code == expect, (path, params, response.text[:2000])
    assert response.headers["content-type"].startswith("text/html")
    return response.text


def listed_payouts(text: str) -> list[str]:
    table = text.split('<table id="results">', 1)[1].split("</table>", 1)[0]
    return _ROW_PAYOUT.findall(table)


def next_link(text: str) -> str | None:
    found = _NEXT.search(text)
    return None if found is None else html.unescape(found.group(1))


def every_page(client: TestClient, path: str, collect: Any, **params: Any) -> list[Any]:
    """Follow the Next page links from `path` on; `collect(text)` gives each page's items."""
    seen: list[Any] = []
    text = page(client, path, **params)
    for _ in range(50):
        seen += collect(text)
        link = next_link(text)
        if link is None:
            return seen
        text = page(client, link)
    raise AssertionError("more than 50 pages")


# ---------------------------------------------------------------------------- losses


def test_the_loss_page_lists_the_report_with_its_totals_and_charts(client: TestClient, ids: dict[str, str]) -> None:
    text = page(client, "/ops/losses")  # local mode: every tenant
    assert listed_payouts(text) == [row["payout_id"] for row in with_ids(expected.EVERY_TENANT, ids)]
    totals = text.split('<table id="totals">', 1)[1].split("</table>", 1)[0]
    assert "12.40 EUR" in totals and "63.25 USD" in totals  # acme's 53.00 USD and globex's 10.25
    assert "50.25 USD" in text and "200.00 USD" in text  # charged_back: its loss, its chargeback
    assert text.count("<svg") == 4  # by day and by component, for each of EUR and USD
    eur = text.split('id="charts-EUR"', 1)[1].split("</section>", 1)[0]
    assert "<title>2026-02-05: 300.00 EUR</title>" in eur  # chargeback_won's chargeback, a bar up
    assert "<title>2026-02-20: -300.00 EUR</title>" in eur  # and its reversal, a bar down
    assert "<title>refunds: 4.00 EUR</title>" in eur  # sepa_refund's, a component bar
    acme = page(client, "/ops/losses", tenant="acme")
    assert listed_payouts(acme) == [row["payout_id"] for row in with_ids(expected.ALL_TIME, ids)]
    assert "53.00 USD" in acme


def test_the_charts_add_up_to_the_report(database: Database, ids: dict[str, str]) -> None:
    """One statement by day and component: per currency, its days add up to its totals, and
    its totals' losses are the report's (a payout that nets to 0 adds 0 to both)."""
    for tenant_id, from_day in ((None, None), ("acme", None), ("acme", "2026-02-01")):
        filters = losses.parse_filters(tenant_id, from_day=from_day)
        with database.read() as connection:
            losses.begin_report(connection)
            found = losses.report(connection, filters, after=None, limit=100)
            by_day = charts.by_day_and_component(connection, filters, days_max=100)
        assert not by_day.cut
        assert {t.currency: t.loss_minor for t in by_day.totals} == {t.currency: t.loss_minor for t in found.totals}
        for total in by_day.totals:
            days = [day for day in by_day.days if day.currency == total.currency]
            assert sum(day.loss_minor for day in days) == total.loss_minor
            assert sum(day.chargebacks_minor for day in days) == total.chargebacks_minor
    with database.read() as connection:
        acme = charts.by_day_and_component(connection, losses.parse_filters("acme", currency="EUR"), days_max=100)
        latest = charts.by_day_and_component(connection, losses.parse_filters("acme", currency="EUR"), days_max=2)
    day = {d.effective_on: d for d in acme.days}["2026-02-05"]
    assert (day.currency, day.chargebacks_minor, day.loss_minor) == ("EUR", 30_000, 30_000)
    assert [d.effective_on for d in latest.days] == ["2026-02-20", "2026-03-02"] and latest.cut
    assert latest.totals == acme.totals  # the totals cover every day, whatever the chart shows
    assert all(type(d.fees_minor) is int and type(d.loss_minor) is int for d in acme.days + acme.totals)


def test_the_chart_geometry_is_integer() -> None:
    days = [
        charts.DayLoss("2026-01-01", "USD", 300, 0, 0, 0, 0, 0, 0, 0),
        charts.DayLoss("2026-01-03", "USD", 0, 0, 0, 0, 0, 0, 100, 0),
        charts.DayLoss("2026-01-03", "EUR", 1, 0, 0, 0, 0, 0, 0, 0),
    ]
    chart = loss_pages.day_chart(days, "USD")
    assert (chart["top"], chart["bottom"], chart["zero_y"]) == (300, -100, 120)  # 160 * 300 // 400
    up, down = chart["bars"]
    assert (up["y"], up["height"]) == (0, 120)
    assert (down["y"], down["height"]) == (120, 40)  # 100 * 160 // 400, below the zero line
    pitch, width = slot_of(loss_pages.CHART_SLOTS_MIN, loss_pages.CHART_WIDTH)  # three days: a month's slots
    assert down["width"] == up["width"] == width and down["x"] - up["x"] == 2 * pitch  # two days apart
    assert loss_pages.CHART_WIDTH - pitch < down["x"] + down["width"] <= loss_pages.CHART_WIDTH  # the last slot
    parts = loss_pages.parts_chart(charts.DayLoss(None, "USD", 25, 200, 0, 0, 25, 0, 0, 0))
    widths = {bar["label"]: (bar["width"], bar["minus"]) for bar in parts["bars"]}
    assert widths["return fees"] == (loss_pages.PARTS_WIDTH, False)
    assert widths["fees"] == (25 * loss_pages.PARTS_WIDTH // 200, False)
    assert widths["fee reversals"] == (75, True) and widths["refunds"] == (0, True)
    assert parts["loss"] == 200
    for bar in [*chart["bars"], *parts["bars"]]:
        assert all(type(value) is int for key, value in bar.items() if key in ("x", "y", "width", "height"))


def test_one_day_of_data_is_one_narrow_bar_not_the_charts_width() -> None:
    chart = loss_pages.day_chart([charts.DayLoss("2026-01-01", "USD", 300, 0, 0, 0, 0, 0, 0, 0)], "USD")
    (bar,) = chart["bars"]
    assert bar["width"] * 20 < loss_pages.CHART_WIDTH and bar["x"] + bar["width"] <= loss_pages.CHART_WIDTH
    assert chart["last_x"] == bar["x"] + bar["width"] and chart["first"] == chart["last"] == "2026-01-01"
    wide = [charts.DayLoss(f"2026-{month:02d}-01", "USD", 1, 0, 0, 0, 0, 0, 0, 0) for month in range(1, 13)]
    bars = loss_pages.day_chart(wide, "USD")["bars"]  # 335 days: a slot each, every bar inside the plot
    assert bars[0]["x"] >= 0 and bars[-1]["x"] + bars[-1]["width"] <= loss_pages.CHART_WIDTH


def test_the_loss_page_filters_and_refuses_a_bad_filter(client: TestClient, ids: dict[str, str]) -> None:
    january = page(client, "/ops/losses", tenant="acme", **{"from": "2026-01-01", "to": "2026-01-31"})
    assert listed_payouts(january) == [row["payout_id"] for row in with_ids(expected.JANUARY, ids)]
    assert 'value="2026-01-01"' in january  # the form keeps the filters
    sepa = page(client, "/ops/losses", tenant="acme", rail="sepa")
    assert listed_payouts(sepa) == [ids["sepa_short"], ids["sepa_refund"]]
    usd = page(client, "/ops/losses", currency="USD")
    assert "EUR" not in usd.split('<table id="totals">', 1)[1].split("</table>", 1)[0]
    for params, message in (
        ({"from": "2026-02-30"}, "from must be a date YYYY-MM-DD"),
        ({"from": "2026-02-01", "to": "2026-01-01"}, "is after to"),
        ({"rail": "swift"}, "rail must be one of ach, sepa"),
        ({"currency": "XYZ"}, "ISO 4217"),
        ({"tenant": "no tenant"}, "tenant must be a tenant id"),
        ({"starting_after": ids["globex"], "tenant": "acme"}, "starting_after is not a payout of this report"),
        ({"starting_after": ids["globex"]}, "needs starting_after_tenant"),
    ):
        refused = page(client, "/ops/losses", 400, **params)
        assert 'class="flash error"' in refused and html.escape(message) in refused, (params, refused[-3000:])
        csv_refused = client.get("/ops/losses.csv", params=params)
        if "starting_after" not in params:
            assert csv_refused.status_code == 400 and html.escape(message) in csv_refused.text


def test_the_loss_page_pages_by_cursor(
    client: TestClient, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("paycore.http.console.scope.PAGE_ROWS", 2)
    seen = every_page(client, "/ops/losses", listed_payouts)
    assert seen == [row["payout_id"] for row in with_ids(expected.EVERY_TENANT, ids)]
    first = page(client, "/ops/losses", tenant="acme")
    assert listed_payouts(first) == [ids["charged_back"], ids["sepa_short"]]
    assert every_page(client, "/ops/losses", listed_payouts, tenant="acme") == [
        row["payout_id"] for row in with_ids(expected.ALL_TIME, ids)
    ]


def test_the_csv_is_the_whole_report_in_integers(
    client: TestClient, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loss_pages, "CSV_PAGE_ROWS", 2)  # three statements for six rows: a cursor between each
    response = client.get("/ops/losses.csv", params={"tenant": "acme", "starting_after": ids["sepa_short"]})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == 'attachment; filename="losses-start-to-end.csv"'
    lines = list(csv.reader(io.StringIO(response.text)))
    assert lines[0] == list(loss_pages.CSV_COLUMNS) and lines[0][-2:] == ["loss_minor", "loss"]
    rows = [dict(zip(lines[0], line, strict=True)) for line in lines[1:]]
    wanted = with_ids(expected.ALL_TIME, ids)  # every row: the page's cursor is no filter of the CSV
    assert [row["payout_id"] for row in rows] == [row["payout_id"] for row in wanted]
    for row, want in zip(rows, wanted, strict=True):
        assert {key: row[key] for key in want} == {key: str(value) for key, value in want.items()}
        assert re.fullmatch(r"-?[0-9]+", row["loss_minor"]) and re.fullmatch(r"-?[0-9]+\.[0-9]{2}", row["loss"])
    assert (rows[0]["loss_minor"], rows[0]["loss"]) == ("5025", "50.25")
    february = client.get("/ops/losses.csv", params={"tenant": "acme", "from": "2026-02-01", "to": "2026-02-28"})
    lines = list(csv.reader(io.StringIO(february.text)))
    assert [(line[0], line[-2], line[-1]) for line in lines[1:]] == [
        (ids["fee_reversed"], "-25", "-0.25"),
        (ids["charged_back"], "-15000", "-150.00"),
    ]
    assert february.headers["content-disposition"] == 'attachment; filename="losses-2026-02-01-to-2026-02-28.csv"'
    nothing = page(client, "/ops/losses", tenant="initech")
    assert "No loss in the range." in nothing and nothing.count("<svg") == 1  # an empty chart, still drawn
    empty = client.get("/ops/losses.csv", params={"tenant": "initech"})
    assert empty.status_code == 200 and list(csv.reader(io.StringIO(empty.text))) == [list(loss_pages.CSV_COLUMNS)]


# ---------------------------------------------------------------------------- ledger


def test_the_ledger_lists_accounts_with_balances_and_each_statement(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    cash = create_account(client, "cash.USD", normal_balance="debit")
    alice = create_account(client, "customer.alice", no_overdraft=True)
    bob = create_account(client, "customer.bob")
    moved(client, cash, alice, 10_000)
    moved(client, alice, bob, 1_234)
    hold = client.post(
        "/v1/transfers",
        json={
            "debit_account_id": alice,
            "credit_account_id": bob,
            "amount_minor": 66,
            "currency": "USD",
            "pending": True,
        },
        headers={"Idempotency-Key": "hold-1"},
    )
    assert hold.status_code == 201, hold.text
    text = page(client, "/ops/ledger", code="customer.")
    table = text.split('<table id="results">', 1)[1].split("</table>", 1)[0]
    assert cash not in table and alice in table and bob in table
    alice_row = table.split(alice, 1)[1].split("</tr>", 1)[0]
    # posted 100.00 - 12.34 = 87.66; pending -0.66 (the hold out); available 87.66 - 0.66 = 87.00
    assert re.findall(r'<td class="num">([^<]+)</td>', alice_row) == ["87.66 USD", "-0.66 USD", "87.00 USD"]
    assert f'href="/ops/ledger/accounts/{alice}?tenant=default"' in table
    statement = page(client, f"/ops/ledger/accounts/{alice}", tenant="default")
    assert "customer.alice" in statement and "87.66 USD" in statement
    rows = statement.split('<table id="statement">', 1)[1].split("</table>", 1)[0].count("<tr>") - 1
    assert rows == 3  # the funding, the move to bob, the hold
    assert statement.count(">hold</span>") == 1  # the hold's entry says it is one
    assert page(client, f"/ops/ledger/accounts/{alice}") == statement  # a tenant's id is found without it too
    monkeypatch.setattr("paycore.http.console.scope.PAGE_ROWS", 2)
    codes = every_page(client, "/ops/ledger", lambda t: re.findall(r'<td class="mono">([a-z.A-Z]+)', t))
    assert codes == ["cash.USD", "customer.alice", "customer.bob"]
    entries = every_page(client, f"/ops/ledger/accounts/{alice}", lambda t: re.findall(r"<code>(ent_[^<]+)</code>", t))
    assert len(entries) == 3 == len(set(entries))
    page(client, f"/ops/ledger/accounts/{alice}", 400, starting_after="ent_nope")
    page(client, "/ops/ledger/accounts/acct_nope", 404)
    refused = page(client, "/ops/ledger", 400, starting_after=alice, starting_after_tenant="default", tenant="other")
    assert "starting_after is not an account of this list" in refused


def test_a_statement_links_what_each_transfer_moved_money_for(client: TestClient, ids: dict[str, str]) -> None:
    text = page(client, "/ops/ledger", tenant="acme", code="seller.USD")
    account_id = re.findall(r'href="/ops/ledger/accounts/([^"?]+)\?tenant=acme"', text)[0]
    statement = page(client, f"/ops/ledger/accounts/{account_id}", tenant="acme")
    assert f'href="/ops/payouts/{ids["charged_back"]}"' in statement  # the payout's hold on the seller
    assert "credit" in statement  # the funding transfer's reference type, not linked


# ---------------------------------------------------------------------------- webhooks


def _deliver(database: Database, retry_window_ms: int) -> int:
    config = rounds.Config(
        timeout_ms=1_000,
        lease_ms=10_000,
        batch_max=10,
        backoff_ms=1,
        backoff_max_ms=2,
        retry_window_ms=retry_window_ms,
        disable_after_ms=86_400_000,
        keyring=secrets_keys.KEYRING,  # the `client` fixture's
    )
    time.sleep(0.005)  # past the 1-2 ms backoff
    return rounds.deliver_due(database, config, "test-worker", endpoints_max=4)


def test_the_webhook_page_shows_endpoints_failing_deliveries_and_redelivers(
    client: TestClient, database: Database
) -> None:
    dead = "http://127.0.0.1:9/hook"  # nothing listens: every attempt fails
    made = {}
    for name, events in (("scheduled", ["payout.scheduled"]), ("canceled", ["payout.canceled"])):
        response = client.post(
            "/v1/webhook_endpoints", json={"url": dead, "events": events}, headers={"Idempotency-Key": f"we-{name}"}
        )
        assert response.status_code == 201, response.text
        made[name] = response.json()
    source = payout_support.funded_source(database, "default", 5_000)
    payout = payout_support.schedule(database, "default", source, 1_000)
    assert _deliver(database, retry_window_ms=0) == 1  # the scheduled event: given up at once
    database.transaction(lambda c: payout_service.cancel(c, "default", payout.id, actor="local", now_us=now_us()))
    assert _deliver(database, retry_window_ms=3_600_000) == 1  # the canceled event: to be retried
    text = page(client, "/ops/webhooks")
    for endpoint in made.values():
        assert endpoint["id"] in text and endpoint["secret"] not in text
    assert "whsec_" not in text
    deliveries = text.split('<table id="deliveries">', 1)[1].split("</table>", 1)[0]
    assert deliveries.count("<tr>") == 3  # the header and two failing deliveries
    assert ">failed<" in deliveries and ">retrying<" in deliveries
    assert "payout.scheduled" in deliveries and f'href="/ops/payouts/{payout.id}"' in deliveries
    failed = page(client, "/ops/webhooks", status="failed").split('<table id="deliveries">', 1)[1]
    assert failed.split("</table>", 1)[0].count("<tr>") == 2 and "payout.scheduled" in failed
    one = page(client, "/ops/webhooks", endpoint=made["canceled"]["id"]).split('<table id="deliveries">', 1)[1]
    assert "payout.canceled" in one and "payout.scheduled" not in one.split("</table>", 1)[0]
    page(client, "/ops/webhooks", 400, status="delivered")
    forms = re.findall(r'action="/ops/events/([^"]+)/redeliver"><input type="hidden" name="csrf_token"', deliveries)
    event_id = next(e for e in forms if e in deliveries.split("payout.scheduled", 1)[0].rsplit("<tr>", 1)[1])
    posted = TestClient(client.app, follow_redirects=False).post(
        f"/ops/events/{event_id}/redeliver", data={"csrf_token": csrf_of(client), "tenant_id": "default"}
    )
    assert posted.status_code == 303 and posted.headers["location"].startswith("/ops/webhooks?notice=")
    deliveries_of = client.get(f"/v1/events/{event_id}/deliveries").json()["data"]
    assert len(deliveries_of) == 2  # the failed one and its redelivery


# ---------------------------------------------------------------------------- audit


def test_the_audit_log_filters_pages_and_links_its_objects(
    client: TestClient, ids: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    payout_id = ids["charged_back"]
    text = page(client, "/ops/audit", object_id=payout_id)
    table = text.split('<table id="results" class="audit">', 1)[1].split("</table>", 1)[0]
    assert f'href="/ops/payouts/{payout_id}"' in table and "payout.settled" in table
    assert ids["sepa_short"] not in table
    times = re.findall(r'<td class="when">(2026-[0-9-]+ [0-9:]+Z)</td>', table)
    assert times == sorted(times, reverse=True) and times  # newest first
    settled = page(client, "/ops/audit", type="payout.settled", tenant="acme")
    assert (
        settled.split('<table id="results" class="audit">', 1)[1].count('href="/ops/payouts/') == 9
    )  # acme's settled payouts
    january = page(
        client, "/ops/audit", type="payout.settled", tenant="acme", **{"from": "2026-01-20", "to": "2026-01-21"}
    )
    assert (
        january.split('<table id="results" class="audit">', 1)[1].count('href="/ops/payouts/') == 2
    )  # charged_back, sepa_refund
    assert (
        "payout.settled"
        not in page(client, "/ops/audit", type="payout.settled", tenant="initech").split(
            '<table id="results" class="audit">', 1
        )[1]
    )
    monkeypatch.setattr("paycore.http.console.scope.PAGE_ROWS", 3)
    ids_seen = every_page(
        client, "/ops/audit", lambda t: re.findall(r'<code class="muted">(evt_[^<]+)</code>', t), object_id=payout_id
    )
    assert len(ids_seen) == len(set(ids_seen)) >= 5 and ids_seen == sorted(ids_seen, reverse=True)
    for params, message in (
        ({"from": "2026-13-01"}, "from must be a real day"),
        ({"to": "yesterday"}, "to must be a day YYYY-MM-DD"),
        ({"actor": "x" * 65}, "actor is at most 64 characters"),
        ({"starting_after": "evt_nope"}, "starting_after is not an audit event of this list"),
    ):
        assert message in page(client, "/ops/audit", 400, **params)


# ---------------------------------------------------------------------------- scoping


def test_a_tenant_operator_sees_only_their_tenant(client: TestClient, database: Database, ids: dict[str, str]) -> None:
    def people(connection: Any) -> str:
        for tenant_id in ("acme", "globex"):
            tenants.create_tenant(connection, tenant_id, now_us=now_us())
        return operators.create_operator(connection, "vera", "viewer", tenant_id="acme", now_us=now_us()).token

    token = database.transaction(people)
    browser = TestClient(client.app, follow_redirects=False)
    assert browser.get("/ops/losses").status_code == 303  # local mode is over: sign in first
    assert browser.post("/ops/login", data={"name": "vera", "token": token}).status_code == 303
    for params in ({}, {"tenant": "globex"}):  # the tenant filter is not theirs to change
        text = page(browser, "/ops/losses", **params)
        assert listed_payouts(text) == [row["payout_id"] for row in with_ids(expected.ALL_TIME, ids)]
        assert ids["globex"] not in text and 'name="tenant"' not in text
    csv_text = browser.get("/ops/losses.csv", params={"tenant": "globex"}).text
    assert ids["globex"] not in csv_text and ids["charged_back"] in csv_text
    ledger = page(browser, "/ops/ledger", tenant="globex")
    assert "?tenant=acme" in ledger and "?tenant=globex" not in ledger
    audit = page(browser, "/ops/audit", object_id=ids["globex"])
    assert "payout.settled" not in audit.split('<table id="results" class="audit">', 1)[1]
    assert "payout.settled" in page(browser, "/ops/audit", object_id=ids["charged_back"])
    assert page(browser, "/ops/webhooks").count("<tr>") >= 2


def test_the_audit_log_is_one_line_per_event_its_details_folded(client: TestClient, ids: dict[str, str]) -> None:
    """When, who, what, a link to the object on one line; the event's id, kind and data in a
    folded <details>, indented; no raw JSON in the line itself."""
    payout_id = ids["charged_back"]
    text = page(client, "/ops/audit", object_id=payout_id)
    table = text.split('<table id="results" class="audit">', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr>")[2:]
    assert rows and all(row.count("<details>") == 1 for row in rows)
    for row in rows:
        line, folded = row.split("<details>", 1)
        assert re.search(r'<td class="when">2026-[0-9-]+ [0-9:]+Z</td>', line)
        assert '<td class="who">' in line and '<td class="what">' in line
        assert f'href="/ops/payouts/{payout_id}"' in line
        assert "{" not in line  # the data is folded, never on the line
        assert re.search(r'<code class="muted">evt_[0-9A-Z]+</code>', folded)
        assert "<pre>{" in folded
    assert "<pre>{\n  &#34;" in table  # indented JSON, escaped
