"""The operations console (issue 28 §5) in a real browser: headless Chromium (Debian's
`/usr/bin/chromium`) driven by Playwright, against the real app served over HTTP with the
sandbox processor in process. Each test signs people in at /ops/login in browser contexts of
their own and works the pages as a person does: filters and timelines, a refund asked for with a
double click and approved by a second person, a manual resolution by two people, a
reconciliation break resolved, the losses charts; and what the console refuses: a tenant's API
key, a form without the session's CSRF token.

Every page visited is kept as a full-page screenshot in `test-artifacts/console/` at the
repository root (`<test>-<step>-<what>.png`; a test's earlier ones are removed when it starts).
The data comes through the API with the tenant's key; what changed is checked through the API.

SQLite only: what the console does on each database is the integration tests' business
(tests/integration/ops, on both); these look at the pages and forms a browser gets. Without
`/usr/bin/chromium` the tests are skipped with the reason, and fail under CI=true.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.kit.clock import now_us
from paycore.operators import service as operators
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.report import HEADER
from paycore.tenants import service as tenants
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox
from tests.e2e.support import REPO_ROOT, Reply, call
from tests.integration.ops import overview_support
from tests.integration.reports import world
from tests.support.days import clear_of_midnight
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
# Playwright's own browser download does not work here: Debian's Chromium, always.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REQUIRE_BROWSER = os.environ.get("CI") == "true"
SHOTS = REPO_ROOT / "test-artifacts" / "console"
TIMEOUT_MS = 2_000  # the processor's; generous for a loaded machine (tests/integration/payments)
WAIT_MS = 10_000  # the longest a page or a selector is waited for
VIEWPORT = {"width": 1280, "height": 900}
IN_DOUBT_PLAN = {"seed": 1, "hold_ms": 6000, "settle_late_ms": 0, "rules": [{"fault": "drop_response", "next_n": 1}]}
_keys = itertools.count(1)


@pytest.fixture
def backend() -> str:
    """SQLite only (see the module's docstring): overrides tests/conftest.py's two backends."""
    return "sqlite"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the module; each person gets a browser context of their own."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: `apt-get install -y chromium` (Debian's) runs the console's browser tests"
        if REQUIRE_BROWSER:
            pytest.fail(message + " (mandatory under CI=true)", pytrace=False)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@dataclass
class Console:
    """The app served over HTTP, its sandbox, the tenant's API key and the operators' tokens."""

    base_url: str
    port: int
    sandbox: Sandbox
    database: Database
    api_key: str
    tokens: dict[str, str]
    chromium: Any
    test_name: str
    contexts: list[Any] = field(default_factory=list)
    shots: list[Path] = field(default_factory=list)

    # --- the API, with the tenant's key ------------------------------------------------

    def api(self, method: str, path: str, body: Any = None, *, key: str | None = None) -> Reply:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        if method == "POST" or key is not None:
            headers["Idempotency-Key"] = key or f"browser-{next(_keys)}"
        return call(self.port, method, path, body, headers=headers)

    def account(self) -> str:
        body = {"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
        reply = self.api("POST", "/v1/accounts", body)
        assert reply.status == 201, reply
        return str(reply.body["id"])

    def pay(self, destination: str, amount_minor: int, *, token: str = "tok_ok", description: str = "") -> Reply:
        body: dict[str, Any] = {
            "amount_minor": amount_minor,
            "currency": "USD",
            "source": {"type": "card", "token": token},
            "destination_account": destination,
        }
        if description:
            body["description"] = description
        return self.api("POST", "/v1/payments", body)

    def paid(self, destination: str, amount_minor: int = 2500) -> dict[str, Any]:
        reply = self.pay(destination, amount_minor)
        assert (reply.status, reply.body["status"]) == (201, "succeeded"), reply
        return dict(reply.body)

    def refunds_wait_and_doubts_resolve_by_hand(self) -> None:
        """Every refund waits for an approver (the tenant's key may set a threshold: it tightens
        four eyes); an item in doubt is resolvable by hand at once (shortening the manual window
        loosens a control: an approver, carol, does it on the console's settings page)."""
        reply = self.api("PUT", "/v1/settings", {"refund_approval_threshold_minor": 0})
        assert reply.status == 200, reply
        carol = self.signed_in("carol")
        self.visit(carol, "/ops/settings?tenant=acme", "settings")
        carol.fill("#change-settings input[name=manual_resolution_after_seconds]", "0")
        saved = self.submit(carol, carol.get_by_role("button", name="Save"), "settings-saved")
        assert saved.status == 303 and "Settings of acme changed" in flash(carol), flash(carol)
        shown = self.api("GET", "/v1/settings").body
        assert shown == {"refund_approval_threshold_minor": 0, "manual_resolution_after_seconds": 0}, shown

    def refunds_of(self, payment_id: str) -> list[dict[str, Any]]:
        reply = self.api("GET", f"/v1/payments/{payment_id}/refunds")
        assert reply.status == 200, reply
        return list(reply.body["data"])

    # --- browsers ----------------------------------------------------------------------

    def context(self, **options: Any) -> Any:
        made = self.chromium.new_context(base_url=self.base_url, viewport=VIEWPORT, **options)
        made.set_default_timeout(WAIT_MS)
        self.contexts.append(made)
        return made

    def signed_in(self, name: str) -> Any:
        """A page of a browser of `name`'s own, signed in at /ops/login, on the overview."""
        page = self.context().new_page()
        self.visit(page, "/ops/login", f"login-{name}")
        page.fill("input[name=name]", name)
        page.fill("input[name=token]", self.tokens[name])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{self.base_url}/ops")
        assert f"{name} · " in page.inner_text("header"), page.inner_text("header")
        self.shot(page, f"overview-{name}")
        return page

    def visit(self, page: Any, path: str, label: str, status: int = 200) -> Any:
        response = page.goto(path)
        assert response is not None and response.status == status, (path, response and response.status)
        self.shot(page, label)
        return response

    def shot(self, page: Any, label: str) -> None:
        path = SHOTS / f"{self.test_name}-{len(self.shots) + 1:02d}-{label}.png"
        page.screenshot(path=str(path), full_page=True)
        self.shots.append(path)

    def submit(self, page: Any, button: Any, label: str, *, double: bool = False) -> Any:
        """Click a form's submit button (twice, fast, with `double`) and wait for the page it
        leads to; returns the answer to the (last) POST."""
        with page.expect_response(lambda response: response.request.method == "POST") as posted:
            if double:
                button.dblclick()
            else:
                button.click()
        page.wait_for_load_state()
        self.shot(page, label)
        return posted.value


@pytest.fixture
def console(
    request: pytest.FixtureRequest, settings: Settings, database: Database, chromium: Any, tmp_path: Path
) -> Iterator[Console]:
    """The real app over HTTP (the sandbox in process), tenant `acme` with an API key, and the
    operators alice (operator), bob and carol (approvers), across tenants."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    test_name = request.node.name
    for old in SHOTS.glob(f"{test_name}-*.png"):
        old.unlink()
    sandbox = Sandbox.open(f"sqlite:///{tmp_path / 'sandbox.db'}")
    settings = replace(settings, processor_timeout_ms=TIMEOUT_MS, idempotency_wait_ms=3_000)
    api_key = database.transaction(lambda c: tenants.create_tenant(c, "acme", now_us=now_us())).api_key
    tokens = {
        name: database.transaction(
            functools.partial(operators.create_operator, name=name, role=role, tenant_id=None, now_us=now_us())
        ).token
        for name, role in (("alice", "operator"), ("bob", "approver"), ("carol", "approver"))
    }
    app = create_app(settings, database, InProcessTransport(sandbox, timeout_ms=TIMEOUT_MS))
    try:
        with serve_in_thread(app) as base_url:
            made = Console(
                base_url=base_url,
                port=int(base_url.rsplit(":", 1)[1]),
                sandbox=sandbox,
                database=database,
                api_key=api_key,
                tokens=tokens,
                chromium=chromium,
                test_name=test_name,
            )
            try:
                yield made
            finally:
                for context in made.contexts:
                    context.close()
    finally:
        sandbox.close()


def flash(page: Any) -> str:
    return str(page.inner_text("main .flash"))


def result_ids(page: Any) -> list[str]:
    return [text.strip() for text in page.locator("#results td:first-child code").all_inner_texts()]


# --------------------------------------------------------------------------------- tests


def test_sign_in_filter_the_payments_and_open_a_timeline(console: Console) -> None:
    merchant = console.account()
    first = console.paid(merchant, 1500)
    second = console.paid(merchant, 2500)
    declined = console.pay(merchant, 700, token="tok_declined")
    assert (declined.status, declined.body["status"]) == (402, "failed"), declined

    page = console.context().new_page()
    console.visit(page, "/ops/payments", "login-redirected")
    assert page.url == f"{console.base_url}/ops/login?next=%2Fops%2Fpayments"  # no page without a session
    page.fill("input[name=name]", "alice")
    page.fill("input[name=token]", "opt_not_a_token")
    answer = console.submit(page, page.get_by_role("button", name="Sign in"), "login-refused")
    assert answer.status == 401 and "not a valid operator token" in page.inner_text("[role=alert]")
    assert page.locator("input[name=name]").input_value() == "alice"  # the name typed is kept
    page.fill("input[name=token]", console.tokens["alice"])
    console.submit(page, page.get_by_role("button", name="Sign in"), "payments")
    assert page.url == f"{console.base_url}/ops/payments"  # back where the redirect came from
    assert set(result_ids(page)) == {first["id"], second["id"], declined.body["id"]}

    page.select_option("select[name=status]", "succeeded")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"/ops/payments\?status=succeeded"))
    console.shot(page, "payments-succeeded")
    assert set(result_ids(page)) == {first["id"], second["id"]}
    assert page.locator("select[name=status]").input_value() == "succeeded"  # the form keeps its filter

    page.select_option("select[name=status]", "")
    page.fill("form.filters input[name=q]", second["processor_reference"])
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"/ops/payments\?.*q="))
    console.shot(page, "payments-by-reference")
    assert result_ids(page) == [second["id"]]

    page.fill("form.filters input[name=q]", "pay_NOSUCHTHING")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"q=pay_NOSUCHTHING"))
    console.shot(page, "payments-nothing")
    assert result_ids(page) == [] and "Nothing matches." in page.inner_text("#results")

    console.visit(page, "/ops/payments?currency=USD&min=abc", "payments-bad-filter", status=400)
    assert "min: the amount must be a number written like 12.34 (USD)" in flash(page)

    console.visit(page, f"/ops/payments?q={second['processor_reference']}", "payments-by-reference-again")
    page.click(f"#results a:has-text('{second['id']}')")
    page.wait_for_url(f"{console.base_url}/ops/payments/{second['id']}")
    console.shot(page, "payment")
    assert second["id"] in page.inner_text("h1") and "succeeded" in page.inner_text("h1 .badge")
    assert "25.00 USD" in page.inner_text("dl.facts")
    timeline = page.inner_text("#timeline")
    assert "succeeded" in timeline and "api_key:" in timeline, timeline
    assert page.locator("#timeline tr").count() >= 3  # the header, the request and its answer at least

    console.submit(page, page.get_by_role("button", name="Sign out"), "signed-out")
    assert page.url == f"{console.base_url}/ops/login"
    console.visit(page, "/ops", "after-sign-out")
    assert page.url.startswith(f"{console.base_url}/ops/login")


def test_a_double_clicked_refund_is_one_refund_approved_by_a_second_person(console: Console) -> None:
    merchant = console.account()
    payment = console.paid(merchant, 5000)
    console.refunds_wait_and_doubts_resolve_by_hand()

    bob = console.signed_in("bob")
    console.visit(bob, f"/ops/payments/{payment['id']}", "payment")
    bob.fill("#refund-form input[name=amount]", "12.00")
    bob.fill("#refund-form input[name=reason]", "customer asked")
    form = {
        name: bob.locator(f"#refund-form input[name={name}]").input_value()
        for name in ("csrf_token", "idempotency_key", "amount", "reason")
    }
    posts: list[str] = []

    def count(sent: Any) -> None:
        if sent.method == "POST" and sent.url.endswith(f"/ops/payments/{payment['id']}/refunds"):
            posts.append(sent.url)

    bob.on("request", count)
    answer = console.submit(
        bob, bob.get_by_role("button", name="Request refund"), "refund-requested-double-click", double=True
    )
    assert answer.status == 303, answer.status
    bob.wait_for_url(re.compile(r"/ops/refunds/rf_[0-9A-Z]+\?notice="))
    bob.remove_listener("request", count)
    assert len(posts) in (1, 2), posts  # Chromium may fold the second submission into the first
    [refund] = console.refunds_of(payment["id"])  # exactly one, however many POSTs the browser sent
    assert (refund["amount_minor"], refund["status"]) == (1200, "requires_approval"), refund
    assert refund["id"] in bob.url and "requires_approval" in flash(bob)
    assert "operator:bob" in bob.inner_text("#approval")
    # The same form resent (a click that did reach the server twice): the same refund, answered again.
    resent = bob.context.request.post(f"/ops/payments/{payment['id']}/refunds", form=form, max_redirects=0)
    assert resent.status == 303 and resent.headers["location"].startswith(f"/ops/refunds/{refund['id']}?")
    assert [found["id"] for found in console.refunds_of(payment["id"])] == [refund["id"]]

    assert bob.locator("#approval").get_by_role("button", name="Approve").count() == 0  # never offered
    assert "another approver approves it" in bob.inner_text("#approval")
    token = bob.locator("meta[name=csrf-token]").get_attribute("content")
    refused = bob.context.request.post(  # the form sent all the same: the service refuses it
        f"/ops/refunds/{refund['id']}/approve", form={"csrf_token": token}, max_redirects=0
    )
    assert refused.status == 403 and "cannot also approve" in refused.text(), refused.status
    assert console.api("GET", f"/v1/refunds/{refund['id']}").body["status"] == "requires_approval"

    carol = console.signed_in("carol")
    console.visit(carol, "/ops/approvals", "approvals")
    row = carol.locator("#approvals tr", has_text=refund["id"])
    assert "operator:bob" in row.inner_text() and "12.00 USD" in row.inner_text()
    approved = console.submit(carol, row.get_by_role("button", name="Approve"), "approved")
    assert approved.status == 303
    assert carol.url.startswith(f"{console.base_url}/ops/refunds/{refund['id']}?notice=")
    assert "Refund approved" in flash(carol)
    after = console.api("GET", f"/v1/refunds/{refund['id']}").body
    assert after["status"] == "pending", after
    steps = [(step["to"], step["actor"]) for step in after["history"]]
    assert steps == [("requires_approval", "operator:bob"), ("pending", "operator:carol")], steps
    assert len(console.refunds_of(payment["id"])) == 1
    console.visit(carol, "/ops/approvals", "approvals-empty")
    assert "No refund waits for approval." in carol.inner_text("#approvals")
    print(f"the double click sent {len(posts)} POST(s) of the refund form")


def test_an_in_doubt_payment_resolved_by_hand_by_two_people(console: Console) -> None:
    merchant = console.account()
    console.refunds_wait_and_doubts_resolve_by_hand()
    console.sandbox.set_fault_plan(IN_DOUBT_PLAN)
    reply = console.pay(merchant, 3300)
    assert (reply.status, reply.body["status"]) == (202, "in_doubt"), reply
    payment_id = reply.body["id"]

    alice = console.signed_in("alice")
    console.visit(alice, "/ops/in-doubt", "in-doubt")
    row = alice.locator("tr", has_text=payment_id)
    assert "33.00 USD" in row.inner_text()
    row.get_by_role("link", name="propose →").click()
    alice.wait_for_url(re.compile(rf"/ops/payments/{payment_id}#manual"))
    console.shot(alice, "payment-in-doubt")
    assert "in_doubt" in alice.inner_text("h1 .badge")
    alice.select_option("#propose-form select[name=outcome]", "succeeded")
    alice.fill("#propose-form textarea[name=evidence]", "the processor's dashboard shows the charge captured")
    proposed = console.submit(alice, alice.get_by_role("button", name="Propose a manual resolution"), "proposed")
    assert proposed.status == 303 and "Proposed succeeded" in flash(alice), flash(alice)
    assert "operator:alice" in alice.inner_text("#manual")
    assert alice.get_by_role("button", name="Confirm succeeded").count() == 0  # an operator cannot confirm
    assert console.api("GET", f"/v1/payments/{payment_id}").body["status"] == "in_doubt"  # a proposal moves nothing

    bob = console.signed_in("bob")
    console.visit(bob, f"/ops/payments/{payment_id}", "payment-proposed")
    bob.fill("#manual input[name=note]", "matches the bank statement")
    confirmed = console.submit(bob, bob.get_by_role("button", name="Confirm succeeded"), "confirmed")
    assert confirmed.status == 303 and "Manual resolution confirmed" in flash(bob), flash(bob)
    body = console.api("GET", f"/v1/payments/{payment_id}").body
    assert body["status"] == "succeeded", body
    last = body["history"][-1]
    assert (last["from"], last["to"], last["actor"]) == ("in_doubt", "succeeded", "operator:bob"), last
    assert "succeeded" in bob.inner_text("h1 .badge")
    page = bob.inner_text("main")
    assert "operator:alice" in page and "operator:bob" in page, page
    console.visit(bob, "/ops/in-doubt", "in-doubt-empty")
    assert payment_id not in bob.inner_text("main")


def test_a_reconciliation_break_resolved_by_an_operator(console: Console) -> None:
    clear_of_midnight()  # it reads today's report of what it made (tests/support/days.py)
    merchant = console.account()
    payment = console.paid(merchant, 2500)
    today = dt.datetime.now(dt.UTC).date().isoformat()
    lines = []
    for line in console.sandbox.settlement_report(today):  # the sandbox's report, wrong on the amount
        fields = line.rstrip("\r\n").split(",")
        if len(fields) > 1 and fields[1] == payment["id"]:
            fields[HEADER.index("amount_minor")] = "2400"
            line = ",".join(fields) + "\r\n"
        lines.append(line)
    summary = reconciliation.reconcile(console.database, lines)
    assert dict(summary.breaks) == {"amount_mismatch": 1}, summary

    alice = console.signed_in("alice")
    assert "amount_mismatch" in alice.inner_text("#breaks")  # the overview's open breaks
    console.visit(alice, "/ops/reconciliation", "reconciliation")
    row = alice.locator("#breaks tr", has_text=payment["id"])
    assert "amount_mismatch" in row.inner_text() and "open" in row.inner_text()
    row.locator("td:first-child a").click()
    alice.wait_for_url(re.compile(r"/ops/reconciliation/breaks/"))
    console.shot(alice, "break")
    break_id = alice.url.rsplit("/", 1)[1]
    assert "open" in alice.inner_text("h1 .badge") and "2400" in alice.inner_text("pre")
    alice.select_option("#resolve-form select[name=resolution]", "processor_corrected")
    alice.fill("#resolve-form textarea[name=note]", "the processor sent a corrected line: 2500")
    resolved = console.submit(alice, alice.get_by_role("button", name="Resolve the break"), "break-resolved")
    assert resolved.status == 303 and "Break resolved (processor_corrected)" in flash(alice), flash(alice)
    assert "resolved" in alice.inner_text("h1 .badge")
    assert "processor_corrected by operator:alice" in alice.inner_text("dl.facts")
    assert alice.locator("#resolve-form").count() == 0
    found = console.api("GET", f"/v1/reconciliation/breaks/{break_id}").body
    assert (found["status"], found["resolution"], found["resolved_by"]) == (
        "resolved",
        "processor_corrected",
        "operator:alice",
    ), found
    console.visit(alice, "/ops/reconciliation", "reconciliation-after")
    assert "No break matches." in alice.inner_text("#breaks")


def test_the_losses_page_draws_its_charts(console: Console) -> None:
    """/ops/losses: the loss report's fixture set (tests/integration/reports/world.py) drawn as
    SVG charts, by day and by component for each currency; then filtered to one tenant."""
    ids = world.build(console.database)
    alice = console.signed_in("alice")
    console.visit(alice, "/ops/losses", "losses")
    assert alice.locator("svg.chart").count() == 4  # by day and by component, for EUR and USD
    usd = alice.locator("#charts-USD")
    assert usd.locator("rect").count() >= 8 and "63.25 USD" in alice.inner_text("#totals")
    assert alice.locator("#charts-EUR rect title", has_text="2026-02-20: -300.00 EUR").count() == 1  # a gain, down
    alice.fill("input[name=tenant]", "globex")
    alice.get_by_role("button", name="Filter").click()
    alice.wait_for_url(re.compile(r"/ops/losses\?.*tenant=globex"))
    console.shot(alice, "losses-globex")
    assert result_ids(alice) == [ids["globex"]] and "10.25 USD" in alice.inner_text("#totals")


def test_the_overview_draws_its_charts(console: Console) -> None:
    """/ops: a month of history (written directly: tests/integration/ops/overview_support.py) and
    payments made now through the API, drawn as SVG for the last 24 hours and the last 30 days:
    every bucket its own slot, money in major units, each chart with its data as a table."""
    clear_of_midnight()  # the API's payments and the history's last hour in one day
    overview_support.a_month(console.database, "acme", now_us())
    merchant = console.account()
    console.paid(merchant, 123_456)
    assert console.pay(merchant, 700, token="tok_declined").status == 402
    alice = console.signed_in("alice")
    console.visit(alice, "/ops", "overview-charts")
    assert alice.locator("#activity svg.chart").count() == 12  # six charts, USD and EUR, per window
    statuses = alice.locator("#chart-hours-status")
    assert statuses.locator("rect").count() >= 24 and "succeeded" in statuses.inner_text()
    assert alice.locator("#chart-days-status rect").count() >= 30
    usd = alice.locator("#chart-hours-money-USD")
    assert "1,234.56 USD" in str(usd.locator("table").text_content())  # the table, folded
    assert alice.locator("#chart-days-in-doubt svg title").first.text_content() == "In doubt, last 30 days"
    widths = {
        int(width)
        for width in alice.locator("#chart-days-status svg.chart rect").evaluate_all(
            "rs => rs.map(r => r.getAttribute('width'))"
        )
    }
    assert widths == {13}  # every day's bar in its fixed slot, whatever a day holds
    usd.locator("summary").click()
    console.shot(alice, "overview-table-open")
    assert usd.locator("table tr").count() == 25  # the header and 24 hours


def test_the_ledger_webhooks_and_audit_pages(console: Console) -> None:
    """/ops/ledger and an account's statement, /ops/webhooks (never a secret), /ops/audit by actor."""
    merchant = console.account()
    console.paid(merchant, 1234)
    endpoint = console.api(
        "POST", "/v1/webhook_endpoints", {"url": "https://hooks.example.com/paycore", "events": ["*"]}
    )
    assert endpoint.status == 201, endpoint
    alice = console.signed_in("alice")
    console.visit(alice, "/ops/ledger?code=merchant.", "ledger")
    assert merchant in alice.inner_text("#results") and "12.34 USD" in alice.inner_text("#results")
    alice.click(f"#results a[href^='/ops/ledger/accounts/{merchant}']")
    alice.wait_for_url(re.compile(f"/ops/ledger/accounts/{merchant}"))
    console.shot(alice, "statement")
    assert "12.34 USD" in alice.inner_text("#statement")
    console.visit(alice, "/ops/webhooks", "webhooks")
    assert endpoint.body["id"] in alice.content() and endpoint.body["secret"] not in alice.content()
    console.visit(alice, "/ops/audit?actor=operator:alice", "audit-alice")
    assert "operator.login" in alice.inner_text("#results")


def test_a_tenant_api_key_opens_nothing_in_the_console(console: Console) -> None:
    merchant = console.account()
    payment = console.paid(merchant)
    context = console.context(extra_http_headers={"Authorization": f"Bearer {console.api_key}"})
    page = context.new_page()
    for path, label in (("/ops", "key-overview"), (f"/ops/payments/{payment['id']}", "key-payment")):
        response = page.goto(path)
        assert response is not None and response.status == 200
        console.shot(page, label)
        first = response.request.redirected_from
        assert first is not None and first.response().status == 303, path  # redirected, never the page
        assert page.url.startswith(f"{console.base_url}/ops/login?next="), page.url
        assert "Sign in to paycore ops" in page.inner_text("h1")
        assert page.locator("#timeline, #results, .cards").count() == 0  # nothing of the console's pages
    posted = context.request.post(
        f"/ops/payments/{payment['id']}/refunds",
        form={"amount": "1.00", "idempotency_key": "by-key-1", "csrf_token": "0" * 64},
        max_redirects=0,
    )
    assert posted.status == 401 and "Sign in first" in posted.text(), posted.status
    assert console.refunds_of(payment["id"]) == []


def test_a_form_without_the_sessions_csrf_token_changes_nothing(console: Console) -> None:
    merchant = console.account()
    payment = console.paid(merchant)
    alice = console.signed_in("alice")
    page_path = f"/ops/payments/{payment['id']}"
    token = "#refund-form input[name=csrf_token]"
    for change, label in (
        (f"document.querySelector('{token}').value = 'f'.repeat(64)", "csrf-wrong"),
        (f"document.querySelector('{token}').remove()", "csrf-missing"),
    ):
        console.visit(alice, page_path, f"payment-{label}")
        assert alice.locator(token).count() == 1
        alice.evaluate(change)
        alice.fill("#refund-form input[name=amount]", "1.00")
        refused = console.submit(alice, alice.get_by_role("button", name="Request refund"), label)
        assert refused.status == 403, refused.status
        assert "did not carry this session's CSRF token: nothing was changed" in alice.inner_text("[role=alert]")
        assert console.refunds_of(payment["id"]) == []
    body = console.api("GET", f"/v1/payments/{payment['id']}").body
    assert (body["status"], body["refunded_minor"]) == ("succeeded", 0), body
    console.visit(alice, page_path, "payment-unchanged")
    assert "0.00 USD (refundable 25.00 USD)" in alice.inner_text("dl.facts")
