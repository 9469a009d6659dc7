"""An account's statement in the console shows a running balance on every line: the account's
posted balance once the line was committed, in major units with thousands separators, right on
every page (a page's first line counts everything before it, read from the nearer end of the
history), a hold's line leaving it as it was, and the last line meeting the account's balance."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from paycore.kit.money import format_grouped
from paycore.ledger import statement
from tests.integration.ops.conftest import Console

_ROW = re.compile(r"<tr>\s*<td class=\"num\">(\d+)</td>(.*?)</tr>", re.S)
_RUNNING = re.compile(r'<td class="num running[^"]*"[^>]*>(.*?)</td>', re.S)
_NEXT = re.compile(r'<a rel="next" href="([^"]+)">')


def transfer(console: Console, debit: str, credit: str, amount_minor: int, key: str, **extra: Any) -> str:
    body = {"debit_account_id": debit, "credit_account_id": credit, "amount_minor": amount_minor, "currency": "USD"}
    made = console.env.client.post("/v1/transfers", json=body | extra, headers={"Idempotency-Key": key})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def account(console: Console, code: str, normal: str) -> str:
    made = console.env.client.post(
        "/v1/accounts",
        json={"code": code, "currency": "USD", "normal_balance": normal},
        headers={"Idempotency-Key": code},
    )
    assert made.status_code in (200, 201), made.text
    return str(made.json()["id"])


def running(client: Any, account_id: str) -> dict[int, str]:
    """Every line's running balance, by sequence, following the Next links to the end."""
    shown: dict[int, str] = {}
    path: str | None = f"/ops/ledger/accounts/{account_id}"
    while path is not None:
        page = client.get(path)
        assert page.status_code == 200, page.text[:500]
        for sequence, cells in _ROW.findall(page.text):
            found = _RUNNING.search(cells)
            assert found is not None, cells
            shown[int(sequence)] = html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()
        following = _NEXT.search(page.text)
        path = None if following is None else html.unescape(following.group(1))
    return shown


def history(console: Console) -> tuple[str, dict[int, int]]:
    """A merchant account (credit normal) with 130 entries over three pages: credits of
    1,000.00 to 1,130.00, every tenth a debit back, and a hold (line 61) posted later (line 62)
    in part. The expected posted balance after each line, by sequence."""
    clearing = account(console, "clearing", "debit")
    merchant = account(console, "merchant.main", "credit")
    expected: dict[int, int] = {}
    balance = 0
    for sequence in range(1, 131):
        amount_minor = 100_000 + 100 * sequence
        if sequence == 61:
            hold = transfer(console, merchant, clearing, 5_000, f"t{sequence}", pending=True)
        elif sequence == 62:
            posted = console.env.client.post(
                f"/v1/transfers/{hold}/post", json={"amount_minor": 3_000}, headers={"Idempotency-Key": "post"}
            )
            assert posted.status_code in (200, 201), posted.text
            balance -= 3_000
        elif sequence % 10 == 0:
            transfer(console, merchant, clearing, 7_500, f"t{sequence}")
            balance -= 7_500
        else:
            transfer(console, clearing, merchant, amount_minor, f"t{sequence}")
            balance += amount_minor
        expected[sequence] = balance
    return merchant, expected


def test_every_line_shows_the_running_balance_right_across_pages(console: Console) -> None:
    merchant, expected = history(console)
    browser = console.signed_in("vic")
    shown = running(browser, merchant)
    assert sorted(shown) == list(range(1, 131))  # three pages: 1-50, 51-100 (from the start), 101-130 (from the end)
    for sequence, balance_minor in expected.items():
        assert shown[sequence] == f"{format_grouped(balance_minor, 'USD')} USD", sequence
    assert shown[61] == shown[60]  # the hold leaves the posted balance as it was
    assert "," in shown[130]  # thousands separators: 12,345.67 USD
    body = console.env.client.get(f"/v1/accounts/{merchant}/balance").json()
    assert shown[130] == f"{format_grouped(body['posted_minor'], 'USD')} USD"


def test_a_page_too_far_from_both_ends_shows_no_balance_rather_than_a_slow_page(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    merchant, expected = history(console)
    monkeypatch.setattr(statement, "BALANCE_ENTRIES_READ_MAX", 40)
    shown = running(console.signed_in("vic"), merchant)
    assert shown[1] == f"{format_grouped(expected[1], 'USD')} USD"  # the first page starts at zero
    assert all(shown[sequence] == "—" for sequence in range(51, 101))  # 50 from the start and 80 from the end, past 40
    assert shown[101] == f"{format_grouped(expected[101], 'USD')} USD"
