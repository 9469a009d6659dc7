"""A payout's page shows its bank details masked (the account's or IBAN's last four, the routing
number or BIC, the source account), never a whole account number or IBAN in the page or a log;
a scheduled payout is canceled from it (CSRF, the operator as actor, its hold released), and a
payout waiting on the bank is asked about again."""

from __future__ import annotations

import logging

import pytest

from tests.integration.ops.conftest import Console, act
from tests.support import payouts as payout_support
from tests.support.payouts import ACH, SEPA


def test_a_payout_page_shows_the_bank_details_masked_never_whole(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    database = console.env.database
    source = payout_support.funded_source(database, "acme", 500_000)
    ach = payout_support.schedule(database, "acme", source, 123_456)
    sepa_source = payout_support.funded_source(database, "acme", 50_000, currency="EUR")
    sepa = payout_support.schedule(database, "acme", sepa_source, 2_000, rail="sepa")
    browser = console.signed_in("vic")
    with caplog.at_level(logging.DEBUG):
        page = browser.get(f"/ops/payouts/{ach.id}").text
        sepa_page = browser.get(f"/ops/payouts/{sepa.id}").text
        listed = browser.get("/ops/payouts").text
    assert '<dd class="mono" id="bank-account">•••• 6789</dd>' in page
    assert '<dd class="mono" id="bank-code">110000000</dd>' in page and ">routing number<" in page
    assert f'href="/ops/ledger/accounts/{source}"' in page
    assert "1,234.56 USD" in page
    assert '<dd class="mono" id="bank-account">•••• 3000</dd>' in sepa_page and ">IBAN<" in sepa_page
    assert f'href="/ops/ledger/accounts/{sepa_source}"' in sepa_page
    for whole in (ACH.account_number, SEPA.iban, "0532013000"):
        assert whole is not None
        for text in (page, sepa_page, listed, caplog.text):
            assert whole not in text


def test_a_scheduled_payout_is_canceled_from_the_console_by_an_operator(console: Console) -> None:
    env = console.env
    source = payout_support.funded_source(env.database, "acme", 5_000)
    payout = payout_support.schedule(env.database, "acme", source, 1_000)
    assert payout_support.balance(env.database, "acme", source)[2] == 4_000  # held
    page = f"/ops/payouts/{payout.id}"
    vic = console.signed_in("vic")
    assert 'id="cancel-payout"' not in vic.get(page).text  # a viewer is offered nothing
    assert act(vic, f"{page}/cancel", page=page).status_code == 403
    alice = console.signed_in("alice")
    assert alice.post(f"{page}/cancel", data={"csrf_token": "0" * 64}).status_code == 403  # no CSRF, no cancel
    assert env.client.get(f"/v1/payouts/{payout.id}").json()["status"] == "scheduled"

    shown = alice.get(page).text
    assert 'id="cancel-payout"' in shown and "Cancel payout" in shown
    canceled = act(alice, f"{page}/cancel", page=page)
    assert canceled.status_code == 303, canceled.text[:300]
    body = env.client.get(f"/v1/payouts/{payout.id}").json()
    assert body["status"] == "canceled"
    assert body["history"][-1]["actor"] == "operator:alice"
    assert payout_support.balance(env.database, "acme", source)[2] == 5_000  # the hold released
    after = alice.get(page).text
    assert "Payout canceled" in alice.get(canceled.headers["location"]).text
    assert 'id="cancel-payout"' not in after
    again = act(alice, f"{page}/cancel", page=page)  # canceled already: answered unchanged
    assert again.status_code == 303


def test_a_sent_payout_is_not_cancelable_and_the_bank_is_asked_again(console: Console) -> None:
    env = console.env
    source = payout_support.funded_source(env.database, "acme", 5_000)
    payout = payout_support.schedule(env.database, "acme", source, 1_000)
    payout_support.move(env.database, payout, "queued", "processing", "sent", bank_reference="b-1")
    page = f"/ops/payouts/{payout.id}"
    alice = console.signed_in("alice")
    shown = alice.get(page).text
    assert 'id="cancel-payout"' not in shown and "Ask the bank again now" in shown
    refused = act(alice, f"{page}/cancel", page=page)
    assert refused.status_code == 409 and "only a scheduled or queued payout can be canceled" in refused.text
    asked = act(alice, f"/ops/in-doubt/payout/{payout.id}/ask", page=page)
    assert asked.status_code == 303
    assert "asks the bank" in alice.get(asked.headers["location"]).text
    assert env.client.get(f"/v1/payouts/{payout.id}").json()["status"] == "sent"
