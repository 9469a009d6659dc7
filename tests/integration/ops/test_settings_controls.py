"""Settings that loosen a control change only by an approver in the console (SPEC §7.1,
docs/operations-console.md): raising or clearing the refund approval threshold, shortening the
manual-resolution window. A tenant's API key may tighten them; a loosening by it is 403
`approver_required` and changes nothing. Every change is audited with its old and new values.
On both databases."""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.tenants import settings as tenant_settings
from paycore.tenants.errors import ApproverRequired
from paycore.tenants.settings import TenantSettings
from tests.integration.ops.conftest import Console, act, csrf_of
from tests.integration.payments.conftest import Env
from tests.support.refunds import run_together

DEFAULT_WINDOW = 259_200
PAGE = "/ops/settings?tenant=acme"
FORM = 'id="change-settings"'
KEY_ACTOR = "api_key:key_01RACE"
RACE_ROUNDS = 40


def put(console: Console, threshold: int | None, window: int | None = None) -> Any:
    body: dict[str, Any] = {"refund_approval_threshold_minor": threshold}
    if window is not None:
        body["manual_resolution_after_seconds"] = window
    return console.env.client.put("/v1/settings", json=body)


def shown(console: Console) -> tuple[int | None, int]:
    body = console.env.client.get("/v1/settings").json()
    return body["refund_approval_threshold_minor"], body["manual_resolution_after_seconds"]


def changes(console: Console) -> list[dict[str, Any]]:
    """The audit log's settings changes, newest first."""
    found = console.env.client.get("/v1/audit_events", params={"type": "settings.updated"}).json()["data"]
    return list(found)


def in_console(console: Console, who: str, threshold: str, window: str) -> Any:
    data = {"refund_approval_threshold": threshold, "manual_resolution_after_seconds": window}
    return act(console.signed_in(who), "/ops/settings/acme", data, page=PAGE)


@pytest.mark.parametrize(
    ("threshold", "window", "param"),
    [
        (1001, None, "refund_approval_threshold_minor"),  # raised
        (None, None, "refund_approval_threshold_minor"),  # cleared
        (1000, 0, "manual_resolution_after_seconds"),  # the window shortened to nothing
        (1000, DEFAULT_WINDOW - 1, "manual_resolution_after_seconds"),  # by a second
        (None, 60, "refund_approval_threshold_minor"),  # both: the first named
    ],
)
def test_a_tenant_key_loosening_a_control_is_403_and_changes_nothing(
    console: Console, threshold: int | None, window: int | None, param: str
) -> None:
    assert put(console, 1000).status_code == 200  # a threshold where there was none: tightens
    before = changes(console)
    refused = put(console, threshold, window)
    assert refused.status_code == 403, refused.text
    body = refused.json()
    assert (body["error"], body["param"]) == ("approver_required", param)
    assert "approver" in body["message"] and "/ops/settings" in body["message"]
    assert shown(console) == (1000, DEFAULT_WINDOW)
    assert changes(console) == before  # nothing audited: nothing changed


def test_a_tenant_key_tightens_and_each_change_is_audited(console: Console) -> None:
    steps = [(1000, None), (400, None), (400, DEFAULT_WINDOW + 1), (0, 31_536_000), (0, None)]
    for threshold, window in steps:
        response = put(console, threshold, window)
        assert response.status_code == 200, (threshold, window, response.text)
    assert shown(console) == (0, 31_536_000)  # the window left out kept its value
    audited = [(c["data"]["from"]["refund_approval_threshold_minor"], c["data"]["to"]) for c in changes(console)]
    assert audited[-1] == (None, {"refund_approval_threshold_minor": 1000, "manual_resolution_after_seconds": 259_200})
    assert len(audited) == len(steps)
    assert all(change["actor"].startswith("api_key:key_") for change in changes(console))


def test_an_approver_loosens_in_the_console_audited_with_old_and_new(console: Console) -> None:
    assert put(console, 500, DEFAULT_WINDOW * 2).status_code == 200
    bob = console.signed_in("bob")
    page = bob.get(PAGE)
    assert page.status_code == 200 and FORM in page.text
    assert 'name="refund_approval_threshold" inputmode="decimal" maxlength="24" value="5.00"' in page.text
    assert 'value="518400"' in page.text
    changed = in_console(console, "bob", "", "60")  # cleared, and shortened
    assert changed.status_code == 303, changed.text
    assert changed.headers["location"].startswith(PAGE)
    assert shown(console) == (None, 60)
    last = changes(console)[0]
    assert last["actor"] == "operator:bob"
    assert {key: last["data"][key] for key in ("from", "to")} == {
        "from": {"refund_approval_threshold_minor": 500, "manual_resolution_after_seconds": 518_400},
        "to": {"refund_approval_threshold_minor": None, "manual_resolution_after_seconds": 60},
    }
    after = bob.get(PAGE).text
    assert "operator:bob" in after and "518400 → 60" in after and "500 → none" in after
    raised = in_console(console, "carol", "25.00", "60")  # a threshold again, by another approver
    assert raised.status_code == 303 and shown(console) == (2500, 60)
    assert changes(console)[0]["actor"] == "operator:carol"


@pytest.mark.parametrize("who", ["alice", "vic"])  # an operator, a viewer
def test_who_is_not_an_approver_is_never_offered_the_form_and_is_refused(console: Console, who: str) -> None:
    assert put(console, 500).status_code == 200
    browser = console.signed_in(who)
    page = browser.get(PAGE)
    assert page.status_code == 200 and "5.00 USD" in page.text and "500 minor units" in page.text
    assert FORM not in page.text and "Only an approver" in page.text
    for threshold, window in (("", "0"), ("100", str(DEFAULT_WINDOW))):  # a loosening, and a tightening
        data = {"refund_approval_threshold": threshold, "manual_resolution_after_seconds": window}
        refused = act(browser, "/ops/settings/acme", data, page=PAGE)
        assert refused.status_code == 403 and "approver" in refused.text
    assert shown(console) == (500, DEFAULT_WINDOW)
    assert len(changes(console)) == 1


def test_the_form_needs_the_csrf_token_the_tenant_and_whole_numbers(console: Console) -> None:
    bob = console.signed_in("bob")
    data = {"refund_approval_threshold": "", "manual_resolution_after_seconds": "0"}
    assert bob.post("/ops/settings/acme", data=data).status_code == 403  # no CSRF token
    token = csrf_of(bob, PAGE)
    for threshold, window in (("²", "60"), ("-1", "60"), ("1.555", "60"), ("5", ""), ("5", "31536001"), ("5", "٣")):
        fields = {
            "csrf_token": token,
            "refund_approval_threshold": threshold,
            "manual_resolution_after_seconds": window,
        }
        assert bob.post("/ops/settings/acme", data=fields).status_code == 400, (threshold, window)
    assert bob.post("/ops/settings/nobody", data={**data, "csrf_token": token}).status_code == 404
    assert bob.post("/ops/settings/a%20b", data={**data, "csrf_token": token}).status_code == 400
    assert shown(console) == (None, DEFAULT_WINDOW) and changes(console) == []


def test_a_tenant_operator_sees_and_changes_only_their_tenant(console: Console) -> None:
    console.tenant("globex")
    console.operator("gina", "approver", tenant="globex")
    gina = console.signed_in("gina")
    assert "Settings of <code>globex</code>" in gina.get("/ops/settings").text  # their own, always
    assert "Settings of <code>globex</code>" in gina.get(PAGE).text  # never acme's
    data = {"refund_approval_threshold": "", "manual_resolution_after_seconds": "0"}
    assert act(gina, "/ops/settings/acme", data, page="/ops/settings").status_code == 404
    assert shown(console) == (None, DEFAULT_WINDOW)
    assert act(gina, "/ops/settings/globex", data, page="/ops/settings").status_code == 303
    listed = console.signed_in("bob").get("/ops/settings").text  # the platform's staff pick a tenant
    assert "acme" in listed and "globex" in listed


def test_in_local_mode_the_one_developer_may_loosen_by_the_api_and_in_the_console(env: Env) -> None:
    """No API key and no operator: the one developer is every role, as for approving a refund."""
    assert env.client.put("/v1/settings", json={"refund_approval_threshold_minor": 500}).status_code == 200
    cleared = env.client.put("/v1/settings", json={"refund_approval_threshold_minor": None})
    assert cleared.status_code == 200 and cleared.json()["refund_approval_threshold_minor"] is None
    with TestClient(env.client.app, follow_redirects=False) as browser:
        page = "/ops/settings?tenant=default"
        assert FORM in browser.get(page).text
        data = {"refund_approval_threshold": "", "manual_resolution_after_seconds": "0"}
        assert act(browser, "/ops/settings/default", data, page=page).status_code == 303
    assert env.client.get("/v1/settings").json()["manual_resolution_after_seconds"] == 0
    found = env.client.get("/v1/audit_events", params={"type": "settings.updated"}).json()["data"]
    assert [change["actor"] for change in found] == ["local"] * 3


def _key_sets(database: Database, tenant_id: str, threshold: int) -> str:
    """A tenant key's PUT of the threshold, as the router makes it: 'stored' or 'refused'."""
    wanted = TenantSettings(refund_approval_threshold_minor=threshold)
    try:
        database.transaction(
            lambda connection: tenant_settings.set(
                connection, tenant_id, lambda _current: wanted, actor=KEY_ACTOR, by_approver=False, now_us=now_us()
            )
        )
    except ApproverRequired:
        return "refused"
    return "stored"


def test_two_tightenings_at_once_never_add_up_to_a_loosening(database: Database, settings: Settings) -> None:
    """None -> 100 and None -> 200 at once: each alone tightens, but 200 after 100 loosens. The
    row is locked while a change is judged, so the last one standing is always 100."""
    agents = [Database(settings) for _ in range(2)]
    try:
        outcomes: Counter[tuple[str, str]] = Counter()
        for number in range(RACE_ROUNDS):
            tenant_id = f"race-{number}"
            results = run_together(
                [partial(_key_sets, agent, tenant_id, amount) for agent, amount in zip(agents, (100, 200), strict=True)]
            )
            assert all(isinstance(result, str) for result in results), results
            outcomes[(results[0], results[1])] += 1
            with database.read() as connection:
                assert tenant_settings.get(connection, tenant_id).refund_approval_threshold_minor == 100
    finally:
        for agent in agents:
            agent.dispose()
    assert set(outcomes) <= {("stored", "stored"), ("stored", "refused")}, outcomes
