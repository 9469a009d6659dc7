"""The console's search (`/ops/search?q=`): payments, refunds, payouts and disputes found by id,
reference, idempotency key or metadata value, grouped by kind with links, in the tenant(s) the
person may see; an id naming one object goes straight to its page; a query too short or too long
is refused with its limit in characters; the box is in every page's header."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from paycore.disputes import service as disputes
from paycore.http.console import search
from tests.integration.ops.conftest import Console
from tests.integration.ops.dispute_support import opened
from tests.support import payouts as payout_support


def made_payment(console: Console, key: str, metadata: dict[str, str] | None = None) -> dict[str, Any]:
    env = console.env
    body = {
        "amount_minor": 123_456,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": env.account(),
        "metadata": metadata or {},
    }
    made = env.client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
    assert made.status_code == 201, made.text
    return dict(made.json())


def found_ids(page: str, plural: str) -> list[str]:
    table = re.search(rf'<table class="search" id="results-{plural}">(.*?)</table>', page, re.S)
    return [] if table is None else re.findall(rf'<a href="/ops/{plural}/([A-Za-z0-9_]+)">', table.group(1))


def test_an_id_naming_one_object_goes_to_its_page(console: Console) -> None:
    payment = made_payment(console, "order-1001")
    browser = console.signed_in("vic")
    response = browser.get("/ops/search", params={"q": f"  {payment['id']} "})
    assert response.status_code == 303, response.text[:500]
    assert response.headers["location"] == f"/ops/payments/{payment['id']}"


def test_a_reference_a_key_and_a_metadata_value_list_their_objects_grouped_by_kind(console: Console) -> None:
    payment = made_payment(console, "order-2002", {"order_id": "ORD-7781", "customer": "c_42"})
    other = made_payment(console, "order-2003", {"order_id": "ORD-7782"})
    assert payment["processor_reference"]
    refund = console.env.client.post(
        f"/v1/payments/{payment['id']}/refunds", json={"amount_minor": 100}, headers={"Idempotency-Key": "refund-2002"}
    )
    assert refund.status_code == 201, refund.text
    browser = console.signed_in("vic")

    by_key = browser.get("/ops/search", params={"q": "order-2002"})
    assert by_key.status_code == 200, by_key.text[:500]
    assert found_ids(by_key.text, "payments") == [payment["id"]]
    assert found_ids(by_key.text, "refunds") == []
    assert "idempotency key" in by_key.text
    by_refund_key = browser.get("/ops/search", params={"q": "refund-2002"})
    assert by_refund_key.status_code == 200  # one object, but not by its id: listed, not a redirect
    assert found_ids(by_refund_key.text, "refunds") == [refund.json()["id"]]

    by_reference = browser.get("/ops/search", params={"q": payment["processor_reference"]}).text
    assert found_ids(by_reference, "payments") == [payment["id"]]
    assert "processor reference" in by_reference

    by_metadata = browser.get("/ops/search", params={"q": "ORD-7781"}).text
    assert found_ids(by_metadata, "payments") == [payment["id"]]
    assert other["id"] not in by_metadata
    assert "metadata order_id" in by_metadata
    assert found_ids(browser.get("/ops/search", params={"q": "ord-7781"}).text, "payments") == []  # exact

    nothing = browser.get("/ops/search", params={"q": "order_id"})  # a key is not a value
    assert nothing.status_code == 200 and 'id="nothing-found"' in nothing.text


def test_payouts_and_disputes_are_found_by_id_key_and_processor_id(console: Console) -> None:
    database = console.env.database
    source = payout_support.funded_source(database, "acme", 500_000)
    payout = payout_support.schedule(database, "acme", source, 10_000, key="payout-key-9")
    dispute = opened(console)
    with database.read() as connection:
        stored = disputes.find_any(connection, dispute["id"], tenant_id=None)
    assert stored is not None
    browser = console.signed_in("vic")
    assert found_ids(browser.get("/ops/search", params={"q": "payout-key-9"}).text, "payouts") == [payout.id]
    assert browser.get("/ops/search", params={"q": payout.id}).headers["location"] == f"/ops/payouts/{payout.id}"
    by_processor_id = browser.get("/ops/search", params={"q": stored.processor_dispute_id})
    assert found_ids(by_processor_id.text, "disputes") == [dispute["id"]]
    by_id = browser.get("/ops/search", params={"q": dispute["id"]})
    assert by_id.status_code == 303 and by_id.headers["location"] == f"/ops/disputes/{dispute['id']}"


def test_a_tenant_operator_finds_only_their_tenant(console: Console) -> None:
    payment = made_payment(console, "shared-key-1", {"order_id": "ORD-1"})
    console.tenant("globex")
    console.operator("gina", "viewer", tenant="globex")
    console.operator("alan", "viewer", tenant="acme")
    outsider = console.signed_in("gina")
    for query in (payment["id"], "shared-key-1", "ORD-1", payment["processor_reference"]):
        page = outsider.get("/ops/search", params={"q": query})
        assert page.status_code == 200, (query, page.status_code)
        assert 'id="nothing-found"' in page.text and f'href="/ops/payments/{payment["id"]}"' not in page.text
    insider = console.signed_in("alan")
    assert insider.get("/ops/search", params={"q": payment["id"]}).status_code == 303
    platform = console.signed_in("vic")  # across tenants; a tenant filter narrows it
    narrowed = platform.get("/ops/search", params={"q": "shared-key-1", "tenant": "globex"})
    assert 'id="nothing-found"' in narrowed.text


@pytest.mark.parametrize(
    ("query", "limit"),
    [
        ("ab", "query_chars_min = 3"),
        ("  x  ", "query_chars_min = 3"),
        ("k" * 256, "query_chars_max = 255"),
        ("pay_\x00x", "NUL"),  # the app refuses a NUL in any query before the console reads it
        ("a\nbc", "printable characters only"),
    ],
)
def test_a_query_too_short_or_too_long_is_refused_with_its_limit(console: Console, query: str, limit: str) -> None:
    browser = console.signed_in("vic")
    page = browser.get("/ops/search", params={"q": query})
    assert page.status_code == 400, page.text[:300]
    text = html.unescape(page.text)
    assert limit in text and "characters" in text
    if query.isprintable():
        assert f'name="q" value="{query}"' in text  # kept as typed


def test_an_empty_query_shows_the_form_and_no_error(console: Console) -> None:
    browser = console.signed_in("vic")
    page = browser.get("/ops/search")
    assert page.status_code == 200
    assert "flash error" not in page.text and 'id="search-form"' in page.text


@pytest.mark.parametrize("path", ["/ops", "/ops/payments", "/ops/ledger", "/ops/audit", "/ops/settings"])
def test_every_page_has_the_search_box(console: Console, path: str) -> None:
    page = console.signed_in("vic").get(path)
    assert page.status_code == 200
    assert '<form class="search" method="get" action="/ops/search" role="search">' in page.text


def test_a_query_at_the_longest_is_searched(console: Console) -> None:
    key = "k" * search.QUERY_CHARS_MAX
    payment = made_payment(console, key)
    page = console.signed_in("vic").get("/ops/search", params={"q": key})
    assert found_ids(page.text, "payments") == [payment["id"]]
