"""Money in major units in a real browser, as tests/e2e/test_console_browser.py works the other
pages (its fixtures, its Chromium, its screenshots in `test-artifacts/console/`): an operator
types each accepted amount into a payment's refund form (`12.5`, `12.50`, `1,250.00` USD and
`1250` JPY), each refunded exactly in minor units, and each refused one, shown again on the
payment's page with the reason in major units and what was typed kept in the field. Amounts on
the pages have thousands separators in the currency's exponent."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.test_console_browser import Console, backend, chromium, console, flash

__all__ = ["backend", "chromium", "console"]
pytestmark = pytest.mark.slow

ACCEPTED = [("USD", "12.5", 1250), ("USD", "12.50", 1250), ("USD", "1,250.00", 125_000), ("JPY", "1250", 1250)]
REFUSED = [
    ("USD", "12,50", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "12.345", "USD has at most 2 decimals (12.345 was typed)"),
    ("USD", "1e3", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "-5", "the amount must not be negative"),
    ("USD", "0", "the amount must be more than 0"),
    ("USD", "5,000.01", "3,725.00 USD is refundable; 5,000.01 USD was typed."),
    ("JPY", "12.5", "JPY has no decimals (12.5 was typed)"),
    ("JPY", "9,999", "8,750 JPY is refundable; 9,999 JPY was typed."),
]


def paid_in(console: Console, currency: str, amount_minor: int) -> str:
    made = console.api(
        "POST",
        "/v1/accounts",
        {"code": f"merchant.{currency.lower()}", "currency": currency, "normal_balance": "credit"},
    )
    assert made.status == 201, made
    body = {
        "amount_minor": amount_minor,
        "currency": currency,
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": made.body["id"],
    }
    reply = console.api("POST", "/v1/payments", body)
    assert (reply.status, reply.body["status"]) == (201, "succeeded"), reply
    return str(reply.body["id"])


def fill_refund(console: Console, page: Any, written: str, label: str) -> Any:
    page.fill("#refund-form input[name=amount]", written)
    page.fill("#refund-form input[name=reason]", "customer asked")
    return console.submit(page, page.get_by_role("button", name="Request refund"), label)


def test_each_accepted_and_refused_refund_amount_in_the_browser(console: Console) -> None:
    payments = {"USD": paid_in(console, "USD", 500_000), "JPY": paid_in(console, "JPY", 10_000)}
    alice = console.signed_in("alice")
    console.visit(alice, f"/ops/payments/{payments['USD']}", "usd-payment")
    assert "5,000.00 USD" in alice.inner_text("dl.facts")
    assert "USD" in alice.inner_text("#refund-form label")  # the field names its currency

    for number, (currency, written, amount_minor) in enumerate(ACCEPTED):
        console.visit(alice, f"/ops/payments/{payments[currency]}", f"accept-{number}-form")
        answer = fill_refund(console, alice, written, f"accept-{number}-refunded")
        assert answer.status == 303, (written, answer.status)
        found = re.search(r"/ops/refunds/(rf_[0-9A-Z]+)", alice.url)
        assert found is not None, alice.url
        refund = console.api("GET", f"/v1/refunds/{found.group(1)}").body
        assert (refund["amount_minor"], refund["currency"]) == (amount_minor, currency), (written, refund)

    for number, (currency, written, reason) in enumerate(REFUSED):
        path = f"/ops/payments/{payments[currency]}"
        console.visit(alice, path, f"refuse-{number}-form")
        before = len(console.refunds_of(payments[currency]))
        answer = fill_refund(console, alice, written, f"refuse-{number}-refused")
        assert answer.status in (400, 422), (written, answer.status)
        assert flash(alice) == reason, (written, flash(alice))
        assert alice.url.endswith(f"{path}/refunds")  # the payment's page again, not a "Refused" page
        assert alice.locator("#refund-form input[name=amount]").input_value() == written  # as typed
        assert alice.locator("#refund-form input[name=reason]").input_value() == "customer asked"
        assert len(console.refunds_of(payments[currency])) == before  # nothing refunded

    console.visit(alice, f"/ops/payments/{payments['USD']}", "usd-after")
    facts = alice.inner_text("dl.facts")
    assert "1,275.00 USD (refundable 3,725.00 USD)" in facts, facts
    console.visit(alice, f"/ops/payments/{payments['JPY']}", "jpy-after")
    assert "1,250 JPY (refundable 8,750 JPY)" in alice.inner_text("dl.facts")
    console.visit(alice, "/ops/refunds", "refunds-list")
    assert "1,250.00 USD" in alice.inner_text("#results")
