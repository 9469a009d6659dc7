"""Capture later in the console (issue 40 point 4, SPEC §6.1): an authorized payment's page shows
what is capturable and until when; an operator captures all or part (typed in major units, read
exactly) or cancels, through the same domain functions as the API, once per form, as themself;
a lost answer shows in_doubt with its operation. What changed is checked through the API."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from tests.integration.ops.conftest import Console, act
from tests.integration.payments.capture_support import authorized, money, payment
from tests.integration.payments.capture_support import history as api_history


def opened(console: Console, amount_minor: int = 5000) -> tuple[str, str]:
    """(merchant account, a payment in requires_capture)."""
    merchant = console.env.account()
    return merchant, str(authorized(console.env, merchant, amount_minor)["id"])


def page_of(client: Any, payment_id: str) -> str:
    response = client.get(f"/ops/payments/{payment_id}")
    assert response.status_code == 200, response.text
    return html.unescape(response.text)


def flash_of(text: str) -> str:
    found = re.search(r'<div class="flash[^"]*" role="status">(.*?)</div>', text, re.S)
    assert found is not None, text[:2000]
    return html.unescape(found.group(1))


def capture_form(client: Any, payment_id: str, amount: str, key: str, *, page: str | None = None) -> Any:
    """The payment page's capture form, sent with the CSRF token of `page` (the payment's own)."""
    path = f"/ops/payments/{payment_id}"
    return act(client, f"{path}/capture", {"amount": amount, "idempotency_key": key}, page=page or path)


def cancel_form(client: Any, payment_id: str, key: str) -> Any:
    page = f"/ops/payments/{payment_id}"
    return act(client, f"{page}/cancel", {"idempotency_key": key}, page=page)


def test_the_page_shows_what_is_capturable_until_when_and_offers_capture_and_cancel(console: Console) -> None:
    _, payment_id = opened(console, 5000)
    expires = payment(console.env, payment_id)["authorization_expires_at"]
    text = page_of(console.signed_in("alice"), payment_id)
    assert 'class="badge requires_capture">requires_capture<' in text
    assert re.search(r'id="capturable"><strong>50\.00 USD</strong>', text), text
    shown = re.search(r'id="expires">(\S+) (\S+) · (6d 23h|7d 0h) left', text)
    assert shown is not None, text
    assert f"{shown.group(1)}T{shown.group(2)[:-1]}" == expires[:19], (shown.groups(), expires)
    assert 'action="/ops/payments/' + payment_id + '/capture"' in text and 'value="50.00"' in text
    assert 'action="/ops/payments/' + payment_id + '/cancel"' in text
    assert "Request a refund" not in text  # nothing captured: nothing refundable
    viewer = page_of(console.signed_in("vic"), payment_id)
    assert "50.00 USD" in viewer and "/capture" not in viewer and "/cancel" not in viewer


def test_an_operator_captures_part_typed_in_major_units_once_for_a_double_submit(console: Console) -> None:
    env = console.env
    merchant, payment_id = opened(console, 5000)
    alice = console.signed_in("alice")
    first = capture_form(alice, payment_id, "12.34", "ops-capture-1")
    again = capture_form(alice, payment_id, "12.34", "ops-capture-1")  # the form sent twice
    assert (first.status_code, again.status_code) == (303, 303), (first.text, again.text)
    assert first.headers["location"] == again.headers["location"]
    assert first.headers["location"].startswith(f"/ops/payments/{payment_id}?notice=")
    body = payment(env, payment_id)
    assert (body["status"], body["amount_captured_minor"], body["amount_capturable_minor"]) == ("succeeded", 1234, 0)
    assert money(env, merchant) == (1234, 0)  # the rest released, in one step
    calls = [call["type"] for call in env.events(payment_id, "processor_call")]
    assert calls.count("processor.capture") == 1, calls  # the processor was asked once
    steps = [(step["from"], step["to"], step["cause"], step["actor"]) for step in body["history"]]
    assert steps[-2:] == [  # the person asked: not an API request
        ("requires_capture", "processing", "capture_requested", "operator:alice"),
        ("processing", "succeeded", "processor_answer", "operator:alice"),
    ]
    text = page_of(alice, payment_id)
    assert 'captured</dt><dd id="captured">12.34 USD (released 37.66 USD)' in text
    assert "refundable 12.34 USD" in text and "Request a refund" in text
    notice = alice.get(first.headers["location"]).text
    assert "Captured 12.34 USD; 37.66 USD released." in html.unescape(notice)
    second = capture_form(alice, payment_id, "1.00", "ops-capture-2")  # another form, another key
    assert second.status_code == 409 and "the payment is succeeded" in flash_of(second.text)
    assert payment(env, payment_id)["amount_captured_minor"] == 1234


def test_the_whole_authorization_is_the_forms_own_value(console: Console) -> None:
    env = console.env
    merchant, payment_id = opened(console, 2500)
    alice = console.signed_in("alice")
    typed = re.search(r'name="amount" [^>]*value="([^"]*)"', page_of(alice, payment_id))
    assert typed is not None and typed.group(1) == "25.00"
    assert capture_form(alice, payment_id, typed.group(1), "all").status_code == 303
    assert payment(env, payment_id)["amount_captured_minor"] == 2500 and money(env, merchant) == (2500, 0)


@pytest.mark.parametrize(
    ("typed", "status", "reason"),
    [
        ("12.345", 400, "USD has at most 2 decimals (12.345 was typed)"),
        ("-5", 400, "the amount must not be negative"),
        ("", 400, "type an amount"),
        ("twelve", 400, "the amount must be a number written like 12.34 (USD)"),
        ("1e3", 400, "the amount must be a number written like 12.34 (USD)"),
        ("0.00", 400, "the amount must be more than 0"),
        ("50.01", 422, "At most 50.00 USD is capturable; 50.01 USD was typed."),
    ],
)
def test_an_amount_that_cannot_be_captured_exactly_is_refused_with_the_reason_and_nothing_moves(
    console: Console, typed: str, status: int, reason: str
) -> None:
    env = console.env
    merchant, payment_id = opened(console, 5000)
    refused = capture_form(console.signed_in("alice"), payment_id, typed, f"bad-{typed}")
    assert refused.status_code == status, refused.text
    text = html.unescape(refused.text)
    assert flash_of(refused.text) == reason
    assert f'name="amount" required size="12" inputmode="decimal" autocomplete="off" value="{typed}"' in text
    body = payment(env, payment_id)
    assert (body["status"], body["amount_capturable_minor"]) == ("requires_capture", 5000)
    assert money(env, merchant) == (0, 5000)


def test_an_operator_cancels_an_authorization_and_all_of_it_is_released(console: Console) -> None:
    env = console.env
    merchant, payment_id = opened(console, 5000)
    alice = console.signed_in("alice")
    done = cancel_form(alice, payment_id, "ops-cancel-1")
    assert done.status_code == 303 and cancel_form(alice, payment_id, "ops-cancel-1").status_code == 303
    body = payment(env, payment_id)
    assert (body["status"], body["cancellation_reason"], body["amount_capturable_minor"]) == (
        "canceled",
        "requested",
        0,
    )
    assert money(env, merchant) == (0, 0)
    assert [(step["cause"], step["actor"]) for step in body["history"]][-2:] == [
        ("cancel_requested", "operator:alice"),
        ("processor_answer", "operator:alice"),
    ]
    text = html.unescape(alice.get(done.headers["location"]).text)
    assert "Authorization canceled: 50.00 USD released." in text
    assert 'id="cancellation">requested: all 50.00 USD released' in text and "/capture" not in text
    late = capture_form(alice, payment_id, "1.00", "ops-capture-late")
    assert late.status_code == 409 and "the payment is canceled" in flash_of(late.text)


def test_a_viewer_may_not_capture_or_cancel_and_an_approver_may(console: Console) -> None:
    env = console.env
    _, payment_id = opened(console, 5000)
    vic = console.signed_in("vic")
    refused = [capture_form(vic, payment_id, "1.00", "vic-1"), cancel_form(vic, payment_id, "vic-2")]
    assert [response.status_code for response in refused] == [403, 403]
    assert payment(env, payment_id)["status"] == "requires_capture"
    assert capture_form(console.signed_in("bob"), payment_id, "10", "bob-1").status_code == 303
    assert payment(env, payment_id)["amount_captured_minor"] == 1000


def test_without_the_csrf_token_nothing_is_captured(console: Console) -> None:
    env = console.env
    _, payment_id = opened(console, 5000)
    alice = console.signed_in("alice")
    forged = alice.post(f"/ops/payments/{payment_id}/capture", data={"amount": "1.00", "idempotency_key": "x"})
    assert forged.status_code == 403
    assert payment(env, payment_id)["status"] == "requires_capture"


def test_a_tenant_operator_sees_no_other_tenants_authorization(console: Console) -> None:
    _, payment_id = opened(console, 5000)
    console.tenant("globex")
    console.operator("gina", "operator", tenant="globex")
    gina = console.signed_in("gina")
    assert gina.get(f"/ops/payments/{payment_id}").status_code == 404
    hidden = capture_form(gina, payment_id, "1.00", "gina-1", page="/ops")
    assert hidden.status_code == 404
    assert payment(console.env, payment_id)["status"] == "requires_capture"


def test_a_lost_capture_answer_shows_in_doubt_with_its_operation_until_evidence_ends_it(console: Console) -> None:
    env = console.env
    merchant, payment_id = opened(console, 5000)
    env.faults({"fault": "error_500", "next_n": 1, "ops": ["capture"]})
    alice = console.signed_in("alice")
    sent = capture_form(alice, payment_id, "20", "ops-capture-doubt")
    assert sent.status_code == 303
    text = html.unescape(alice.get(sent.headers["location"]).text)
    assert "No answer from the processor: the payment is in doubt (capture)." in text
    assert 'id="in-doubt-operation"><span class="badge in_doubt">capture</span>' in text
    assert 'id="capture-form"' not in text and 'id="cancel-form"' not in text  # nothing to capture while in doubt
    queue = alice.get("/ops/in-doubt").text
    assert re.search(rf"<code>{payment_id}</code></a> <span class=\"badge in_doubt\" [^>]*>capture</span>", queue)
    assert money(env, merchant) == (0, 5000)
    env.resolve()
    assert payment(env, payment_id)["amount_captured_minor"] == 2000 and money(env, merchant) == (2000, 0)
    assert api_history(env, payment_id)[-1] == ("in_doubt", "succeeded", "resolver")
    assert "in-doubt-operation" not in page_of(alice, payment_id)


def test_the_lists_know_requires_capture_and_canceled(console: Console) -> None:
    _, waiting = opened(console, 5000)
    _, voided = opened(console, 3000)
    alice = console.signed_in("alice")
    assert cancel_form(alice, voided, "void-1").status_code == 303
    for status, expected in (("requires_capture", waiting), ("canceled", voided)):
        listed = alice.get(f"/ops/payments?status={status}")
        assert listed.status_code == 200, listed.text
        assert re.findall(r"<code>(pay_[0-9A-Z]+)</code>", listed.text) == [expected]
        assert f'<option value="{status}" selected>' in listed.text
    overview = alice.get("/ops").text  # today's payments by state link to these lists
    assert "/ops/payments?status=requires_capture" in overview and "/ops/payments?status=canceled" in overview
