"""The lists' amount filters and the settings' refund approval threshold are typed in major units
(kit.money.parse_major: `12.5`, `12.50`, `1,250.00`, a JPY `1250`), turned into minor units
exactly; anything else is refused on the page with what was typed kept and the reason shown."""

from __future__ import annotations

import html
import re

import pytest

from tests.integration.ops.conftest import Console, act
from tests.integration.ops.test_amounts_in_major_units import flash, paid_in, typed
from tests.integration.ops.test_four_eyes import paid

PAGE = "/ops/settings?tenant=acme"


def listed(page: str) -> list[str]:
    return re.findall(r'<tr>\s*<td><a href="/ops/payments/(pay_[0-9A-Z]+)">', page)


def test_amount_filters_read_major_units_of_the_currency_picked(console: Console) -> None:
    _, small = paid(console, amount_minor=1_250)  # 12.50 USD
    _, large = paid(console, amount_minor=125_000)  # 1,250.00 USD
    yen = paid_in(console, "JPY", 1_250)  # 1,250 JPY
    browser = console.signed_in("vic")
    cases = [
        ({"currency": "USD", "min": "12.5", "max": "12.50"}, [small]),
        ({"currency": "USD", "min": "12.51"}, [large]),
        ({"currency": "USD", "min": "1,250.00"}, [large]),
        ({"currency": "USD", "max": " 1,249.99 "}, [small]),
        ({"currency": "JPY", "min": "1250", "max": "1,250"}, [yen]),
        ({"currency": "JPY"}, [yen]),
    ]
    for params, expected in cases:
        page = browser.get("/ops/payments", params=params)
        assert page.status_code == 200, (params, page.text[:300])
        assert listed(page.text) == expected, params
        assert f'<option value="{params["currency"]}" selected>' in page.text


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"currency": "USD", "min": "12,50"}, "min: the amount must be a number written like 12.34 (USD)"),
        ({"currency": "USD", "max": "1.234"}, "max: USD has at most 2 decimals (1.234 was typed)"),
        ({"currency": "JPY", "min": "12.5"}, "min: JPY has no decimals (12.5 was typed)"),
        ({"currency": "USD", "min": "-1"}, "min: the amount must not be negative"),
        ({"min": "12.50"}, "min is an amount in major units of a currency: pick the currency"),
        ({"currency": "XXX", "min": "1"}, "currency must be one of"),
    ],
)
def test_a_refused_amount_filter_keeps_what_was_typed(console: Console, params: dict[str, str], reason: str) -> None:
    page = console.signed_in("vic").get("/ops/payments", params={**params, "q": "kept"})
    assert page.status_code == 400, page.text[:300]
    assert reason in flash(page.text)
    for name in ("min", "max"):
        if name in params:
            assert typed(page.text, name) == params[name]
    assert 'name="q" value="kept"' in page.text  # the list's own filter (the header's box is empty)


@pytest.mark.parametrize(
    ("written", "currency", "threshold_minor"),
    [
        ("12.5", "USD", 1_250),
        ("12.50", "USD", 1_250),
        ("1,250.00", "USD", 125_000),
        ("1250", "JPY", 1_250),
        ("0", "USD", 0),
    ],
)
def test_the_threshold_is_typed_in_major_units(
    console: Console, written: str, currency: str, threshold_minor: int
) -> None:
    data = {
        "refund_approval_threshold": written,
        "threshold_currency": currency,
        "manual_resolution_after_seconds": "259200",
    }
    changed = act(console.signed_in("bob"), "/ops/settings/acme", data, page=PAGE)
    assert changed.status_code == 303, changed.text[:500]
    assert console.env.client.get("/v1/settings").json()["refund_approval_threshold_minor"] == threshold_minor


@pytest.mark.parametrize(
    ("written", "currency", "reason"),
    [
        ("12,50", "USD", "the amount must be a number written like 12.34 (USD)"),
        ("12.505", "USD", "USD has at most 2 decimals"),
        ("12.5", "JPY", "JPY has no decimals"),
        ("-5", "USD", "the amount must not be negative"),
        ("1e3", "USD", "the amount must be a number"),
        ("99999999999999999", "USD", "the amount must be at most 90071992547409.91 USD"),
    ],
)
def test_a_refused_threshold_shows_the_form_again_with_what_was_typed(
    console: Console, written: str, currency: str, reason: str
) -> None:
    before = console.env.client.get("/v1/settings").json()
    bob = console.signed_in("bob")
    data = {
        "refund_approval_threshold": written,
        "threshold_currency": currency,
        "manual_resolution_after_seconds": "77",
    }
    answer = act(bob, "/ops/settings/acme", data, page=PAGE)
    assert answer.status_code == 400, answer.text[:300]
    assert 'id="change-settings"' in answer.text  # the settings page, its form again
    assert reason in flash(answer.text)
    assert typed(answer.text, "refund_approval_threshold") == written
    assert typed(answer.text, "manual_resolution_after_seconds") == "77"
    assert f'<option value="{currency}" selected>' in answer.text
    assert console.env.client.get("/v1/settings").json() == before  # nothing changed
    assert html.escape(written) in answer.text
