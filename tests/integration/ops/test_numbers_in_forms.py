"""A number a person types in the console is written in ASCII digits (paycore.kit.numbers). Any
other digit is refused with the page shown again, what was typed kept in its field and the reason
in a flash: never a 500. `"²".isdigit()` is true and `int("²")` raises: `/ops/payments?min=²`
and the refund form's `amount_minor=²` were 500s (both are now major units: kit.money.parse_major)."""

from __future__ import annotations

import html
import re

import pytest

from tests.integration.ops.conftest import Console, act
from tests.integration.ops.test_four_eyes import paid


def typed(page: str, name: str) -> str | None:
    """The value a form field of the page holds."""
    found = re.search(rf'<input name="{name}"[^>]* value="([^"]*)"', page)
    return None if found is None else html.unescape(found.group(1))


OTHER_DIGITS = ["²", "³", "\u0661\u0662", "\uff11", "\u2460", "½", "1_0", "+5", "-5", "5.0", "9" * 30]


@pytest.mark.parametrize("path", ["/ops/payments", "/ops/refunds", "/ops/payouts"])
def test_an_amount_filter_in_other_digits_shows_the_list_again_with_a_400(console: Console, path: str) -> None:
    browser = console.signed_in("vic")
    for written in [written for written in OTHER_DIGITS if written != "5.0"]:  # 5.0 is 5.00 USD
        for name in ("min", "max"):
            page = browser.get(path, params={name: written, "q": "kept", "currency": "USD"})
            assert page.status_code == 400, (path, name, written, page.text[:300])
            assert f"{name}: the amount must" in html.unescape(page.text)
            assert f'name="{name}" value="{html.escape(written)}"' in page.text  # kept as typed
            assert 'name="q" value="kept"' in page.text
    assert browser.get(path, params={"min": "0", "max": "100", "currency": "USD"}).status_code == 200
    assert browser.get(path, params={"min": "5.0", "currency": "USD"}).status_code == 200


def test_a_refund_amount_in_other_digits_shows_the_form_again_and_refunds_nothing(console: Console) -> None:
    _, payment_id = paid(console)
    browser = console.signed_in("alice")
    page = f"/ops/payments/{payment_id}"
    for written in [written for written in OTHER_DIGITS if written != "5.0"]:  # 5.0 is 5.00 USD
        data = {"amount": written, "reason": "customer asked", "idempotency_key": f"k-{written.encode().hex()}"}
        answer = act(browser, f"{page}/refunds", data, page=page)
        assert answer.status_code == 400, (written, answer.text[:300])
        assert "the amount must" in answer.text
        assert 'id="refund-form"' in answer.text  # the payment's page, its form again
        assert typed(answer.text, "amount") == written
        assert typed(answer.text, "reason") == "customer asked"
    listed = console.env.client.get(f"/v1/payments/{payment_id}/refunds").json()["data"]
    assert listed == []
    done = act(browser, f"{page}/refunds", {"amount": "2.50", "idempotency_key": "k-ascii"}, page=page)
    assert done.status_code == 303, done.text[:300]


def test_a_refused_refund_amount_keeps_what_was_typed(console: Console) -> None:
    """A refusal of the amount by the refund's own rules (zero, more than refundable) shows the
    form again too, with what was typed."""
    _, payment_id = paid(console, amount_minor=1000)
    browser = console.signed_in("alice")
    page = f"/ops/payments/{payment_id}"
    for written, status in (("0", 400), ("50.00", 422)):
        data = {"amount": written, "reason": "too much", "idempotency_key": f"k-{written}"}
        answer = act(browser, f"{page}/refunds", data, page=page)
        assert answer.status_code == status, (written, answer.text[:300])
        assert 'id="refund-form"' in answer.text
        assert (typed(answer.text, "amount"), typed(answer.text, "reason")) == (written, "too much")
