"""Money in the console is typed and shown in major units: the refund form reads `12.5`, `12.50`,
`1,250.00` and a JPY `1250` exactly (kit.money.parse_major, string arithmetic, no float), refuses
anything else on the payment's page with what was typed kept in the form, speaks its refusals in
major units, and shows amounts with thousands separators in the currency's exponent."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from tests.integration.ops.conftest import Console, act
from tests.integration.ops.test_four_eyes import paid, refund_id_of


def typed(page: str, name: str) -> str | None:
    found = re.search(rf'<input name="{name}"[^>]* value="([^"]*)"', page)
    return None if found is None else html.unescape(found.group(1))


def flash(page: str) -> str:
    found = re.search(r'<div class="flash error" role="status">(.*?)</div>', page, re.S)
    assert found is not None, page[:800]
    return html.unescape(found.group(1))


def paid_in(console: Console, currency: str, amount_minor: int) -> str:
    env = console.env
    made = env.client.post(
        "/v1/accounts",
        json={"code": f"merchant.{currency.lower()}", "currency": currency, "normal_balance": "credit"},
        headers={"Idempotency-Key": f"acct-{currency}"},
    )
    assert made.status_code in (200, 201), made.text
    body = {
        "amount_minor": amount_minor,
        "currency": currency,
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": made.json()["id"],
    }
    payment = env.client.post("/v1/payments", json=body, headers={"Idempotency-Key": f"pay-{currency}"})
    assert payment.status_code == 201, payment.text
    return str(payment.json()["id"])


def refund(console: Console, payment_id: str, written: str, key: str) -> Any:
    browser = console.signed_in("alice")
    page = f"/ops/payments/{payment_id}"
    return act(browser, f"{page}/refunds", {"amount": written, "reason": "asked", "idempotency_key": key}, page=page)


@pytest.mark.parametrize(
    ("currency", "paid_minor", "written", "refund_minor"),
    [
        ("USD", 500_000, "12.5", 1250),
        ("USD", 500_000, "12.50", 1250),
        ("USD", 500_000, "1,250.00", 125_000),
        ("USD", 500_000, " 0.29 ", 29),  # float(0.29) * 100 is 28.999999999999996
        ("JPY", 5000, "1250", 1250),
        ("JPY", 5000, "1,250", 1250),
    ],
)
def test_each_accepted_amount_is_refunded_exactly_in_minor_units(
    console: Console, currency: str, paid_minor: int, written: str, refund_minor: int
) -> None:
    payment_id = paid_in(console, currency, paid_minor) if currency != "USD" else paid(console, paid_minor)[1]
    answer = refund(console, payment_id, written, f"k-{written.strip()}")
    assert answer.status_code == 303, (written, answer.text[:500])
    made = console.env.client.get(f"/v1/refunds/{refund_id_of(answer)}").json()
    assert (made["amount_minor"], made["currency"]) == (refund_minor, currency)
    assert type(made["amount_minor"]) is int


REFUSED = [
    ("USD", "", "type an amount"),
    ("USD", "0", "the amount must be more than 0"),
    ("USD", "0.00", "the amount must be more than 0"),
    ("USD", "-5", "the amount must not be negative"),
    ("USD", "12.345", "USD has at most 2 decimals (12.345 was typed)"),
    ("USD", "12,50", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "1,00", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "1e3", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "$12", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "12 USD", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "²", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "\uff11", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "NaN", "the amount must be a number written like 12.34 (USD)"),
    ("USD", "9" * 30, "the amount must be at most 24 characters"),
    ("USD", "5,000.01", "5,000.00 USD is refundable; 5,000.01 USD was typed."),
    ("JPY", "12.5", "JPY has no decimals (12.5 was typed)"),
    ("JPY", "5,001", "5,000 JPY is refundable; 5,001 JPY was typed."),
]


@pytest.mark.parametrize(("currency", "written", "reason"), REFUSED)
def test_each_refused_amount_shows_the_form_again_with_what_was_typed_and_why(
    console: Console, currency: str, written: str, reason: str
) -> None:
    payment_id = paid_in(console, currency, 5000) if currency != "USD" else paid(console, 500_000)[1]
    answer = refund(console, payment_id, written, f"k-{written.encode().hex()}")
    assert answer.status_code in (400, 422), (written, answer.text[:500])
    assert flash(answer.text) == reason
    assert "minor units" not in flash(answer.text)
    assert 'id="refund-form"' in answer.text  # the payment's page, its form again
    assert typed(answer.text, "amount") == written
    assert typed(answer.text, "reason") == "asked"
    assert console.env.client.get(f"/v1/payments/{payment_id}/refunds").json()["data"] == []


def test_amounts_are_shown_with_thousands_separators_in_the_currency_exponent(console: Console) -> None:
    _, usd = paid(console, 100_000)
    jpy = paid_in(console, "JPY", 1_234_567)
    browser = console.signed_in("vic")
    page = browser.get(f"/ops/payments/{usd}").text
    assert "1,000.00 USD" in page and "refundable 1,000.00 USD" in page
    assert "1000.00 USD" not in page
    assert "1,234,567 JPY" in browser.get(f"/ops/payments/{jpy}").text
    assert "1,000.00 USD" in browser.get("/ops/payments").text
