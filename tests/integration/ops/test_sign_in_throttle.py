"""The console's sign-in throttle (paycore.operators.service.sign_in): failed sign-ins counted per
operator name and client address, so that someone guessing one operator's token from an address
(an office behind one NAT) does not lock out the other operators signing in from it; and per
address over every name, a larger bound, so that nobody tries many names either. Counted in the
database (every API process sees one count), a name that exists and one that does not answered
and counted alike, the rows that count nothing any more deleted."""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from paycore.config import Settings
from paycore.http.app import create_app
from tests.integration.ops.conftest import Console

OFFICE = "203.0.113.7"  # one NAT: the attacker and the operators share it
ELSEWHERE = "198.51.100.9"


def browser_at(console: Console, address: str, settings: Settings | None = None) -> TestClient:
    """A browser whose requests come from `address`, on the console's app or one with `settings`."""
    env = console.env
    app = env.client.app if settings is None else create_app(settings, env.database, env.processor)
    client = TestClient(app, follow_redirects=False, client=(address, 50_000))
    console.browsers.append(client)
    return client


def login(browser: TestClient, name: str, token: str) -> Any:
    return browser.post("/ops/login", data={"name": name, "token": token})


def counts(console: Console) -> dict[tuple[str, str], tuple[int, bool]]:
    """(address, name) -> (failures in the window, blocked at all)."""
    from paycore.operators.models import operator_sign_in_counts

    with console.env.database.read() as connection:
        rows = connection.execute(select(operator_sign_in_counts)).all()
    return {(row.address, row.operator_name): (row.failures, row.blocked_until_us is not None) for row in rows}


def test_an_attacker_failing_on_one_operator_does_not_lock_out_another_behind_the_same_address(
    console: Console,
) -> None:
    attacker, colleague = browser_at(console, OFFICE), browser_at(console, OFFICE)
    for guess in range(5):
        assert login(attacker, "alice", f"pco_guess{guess}").status_code == 401
    assert login(attacker, "alice", "pco_guess5").status_code == 429  # alice is blocked at the office
    assert login(colleague, "alice", console.tokens["alice"]).status_code == 429  # even with her token, there
    for name in ("bob", "carol"):  # the other operators behind the same address sign in
        signed = login(colleague, name, console.tokens[name])
        assert signed.status_code == 303, signed.text[:300]
    assert login(browser_at(console, ELSEWHERE), "alice", console.tokens["alice"]).status_code == 303


def test_the_address_bound_trips_for_many_names_from_one_address(console: Console) -> None:
    settings = replace(console.env.settings, ops_sign_in_failures_max=5, ops_sign_in_address_failures_max=12)
    attacker, colleague = browser_at(console, OFFICE, settings), browser_at(console, OFFICE, settings)
    for number in range(11):
        assert login(attacker, f"name{number}", "pco_guess").status_code == 401
    assert login(colleague, "bob", console.tokens["bob"]).status_code == 303  # 11 failures: not yet
    assert login(attacker, "name11", "pco_guess").status_code == 401  # the 12th: the address is blocked
    blocked = login(colleague, "carol", console.tokens["carol"])
    assert blocked.status_code == 429 and "from this address" in blocked.text
    assert 1 <= int(blocked.headers["retry-after"]) <= settings.ops_sign_in_window_ms // 1000
    for number in range(12, 40):  # further names from there are refused unread, and make no rows
        assert login(attacker, f"name{number}", "pco_guess").status_code == 429
    # A row per name that failed and the address's; bob's (he signed in: it counted nothing) was
    # deleted by the next failure.
    assert {name for _, name in counts(console)} == {"*", *(f"name{number}" for number in range(12))}
    assert login(browser_at(console, ELSEWHERE, settings), "carol", console.tokens["carol"]).status_code == 303


def test_a_name_that_does_not_exist_is_answered_and_throttled_as_one_that_does(console: Console) -> None:
    """The same page (but for the name typed, shown again), the same counting, the same block:
    nothing tells `alice` (an operator) from `nobody` (none), nor either from a name no operator
    could have, nor a wrong token from another operator's."""
    browser = browser_at(console, OFFICE)
    answers: dict[str, list[tuple[int, str]]] = {}
    for name, token in (("alice", "pco_wrong"), ("nobody", "pco_wrong"), ("dave", console.tokens["bob"])):
        answers[name] = [_seen(login(browser, name, token)) for _ in range(6)]
    assert answers["alice"] == answers["nobody"] == answers["dave"]
    assert [status for status, _ in answers["alice"]] == [401] * 5 + [429]
    for ill_formed in ("Robert'); --", "x" * 41, "*", "Al ice"):  # no row of their own, the same answer
        assert _seen(login(browser, ill_formed, "pco_wrong")) == answers["alice"][0]
    assert login(browser, "", "pco_wrong").status_code == 401  # the form asks for the name first
    assert {name for _, name in counts(console)} == {"*", "alice", "nobody", "dave"}


def _seen(response: Any) -> tuple[int, str]:
    """The answer as the person sees it, the name they typed (shown again in its field) taken out."""
    return response.status_code, re.sub(r'name="name" value="[^"]*"', 'name="name" value=""', response.text)


def test_failures_are_counted_once_each_across_processes_and_threads(console: Console) -> None:
    """Two apps on one database (two API processes), eight threads each: every failure counted,
    none lost to a race (the row is locked on PostgreSQL; SQLite takes one writer at a time)."""
    settings = replace(console.env.settings, ops_sign_in_failures_max=1_000, ops_sign_in_address_failures_max=1_000)
    browsers = [browser_at(console, OFFICE, settings) for _ in range(2)]
    per_thread = 5
    statuses: list[int] = []

    def fail(browser: TestClient) -> None:
        for _ in range(per_thread):
            statuses.append(login(browser, "alice", "pco_wrong").status_code)

    threads = [threading.Thread(target=fail, args=(browsers[number % 2],)) for number in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert statuses == [401] * 16 * per_thread
    assert counts(console) == {(OFFICE, "*"): (80, False), (OFFICE, "alice"): (80, False)}


def test_a_block_set_by_one_process_holds_in_another(console: Console) -> None:
    first, second = browser_at(console, OFFICE), browser_at(console, OFFICE, console.env.settings)
    for number in range(5):
        assert login((first, second)[number % 2], "alice", "pco_wrong").status_code == 401
    assert login(second, "alice", console.tokens["alice"]).status_code == 429
    assert login(first, "alice", console.tokens["alice"]).status_code == 429


def test_rows_that_count_nothing_any_more_are_deleted(console: Console) -> None:
    import time

    window_ms = 1_000
    settings = replace(console.env.settings, ops_sign_in_window_ms=window_ms)
    attacker = browser_at(console, OFFICE, settings)
    for number in range(10):
        assert login(attacker, f"name{number}", "pco_guess").status_code == 401
    assert len(counts(console)) == 11
    time.sleep(window_ms / 1000 + 0.1)
    assert login(browser_at(console, ELSEWHERE, settings), "bob", "pco_wrong").status_code == 401
    assert counts(console) == {(ELSEWHERE, "*"): (1, False), (ELSEWHERE, "bob"): (1, False)}


def test_a_successful_sign_in_starts_its_name_afresh_but_not_its_address(console: Console) -> None:
    browser = browser_at(console, OFFICE)
    for _ in range(4):
        assert login(browser, "alice", "pco_typo").status_code == 401
    assert login(browser, "alice", console.tokens["alice"]).status_code == 303
    assert counts(console) == {(OFFICE, "*"): (4, False), (OFFICE, "alice"): (0, False)}
    assert login(browser, "alice", "pco_typo").status_code == 401  # one more typo is no block


def test_an_ipv6_host_is_counted_by_its_64_and_a_mapped_ipv4_as_ipv4() -> None:
    from paycore.operators.service import counted_address

    assert counted_address("2001:db8:1:2:aaaa::1") == counted_address("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert counted_address("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert counted_address("::ffff:203.0.113.7") == counted_address("203.0.113.7") == "203.0.113.7"
    assert counted_address("testclient") == "testclient"


def test_an_attacker_walking_an_ipv6_64_meets_one_address_bound(console: Console) -> None:
    settings = replace(console.env.settings, ops_sign_in_failures_max=5, ops_sign_in_address_failures_max=6)
    for number in range(6):
        browser = browser_at(console, f"2001:db8::{number + 1:x}", settings)
        assert login(browser, f"name{number}", "pco_x").status_code == 401
    blocked = login(browser_at(console, "2001:db8::ffff", settings), "carol", console.tokens["carol"])
    assert blocked.status_code == 429 and "from this address" in blocked.text
