"""Who may open the console (issue 28 §1): operator tokens, sessions, the sign-in throttle,
tenant keys refused, local mode, CSRF."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from paycore.cli.main import app as cli
from paycore.http.app import create_app
from tests.integration.ops.conftest import Console, act, csrf_of
from tests.integration.payments.conftest import Env


def audit_types(console: Console, tenant: str | None = None) -> list[tuple[str, str, str]]:
    """(type, outcome, actor) of the console's access events, oldest first, every tenant."""
    from paycore.audit import service as audit

    with console.env.database.read() as connection:
        found = audit.audit_page(connection, audit.AuditFilter(tenant_id=tenant), starting_after=None, limit=100)
    return [(e.type, e.cause, e.actor) for e in reversed(found) if e.type.startswith("operator.")]


def test_operators_are_created_listed_and_disabled_from_the_cli(database_url: str) -> None:
    patch = pytest.MonkeyPatch()
    patch.setenv("PAYCORE_DATABASE_URL", database_url)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level  # the CLI logs to its (captured) stderr
    runner = CliRunner()
    try:
        made = runner.invoke(cli, ["operators", "create", "dana", "--role", "approver"])
        assert made.exit_code == 0, made.output
        token = made.output.strip().splitlines()[-1]
        assert token.startswith("pco_") and len(token) > 40  # alone on the last line
        again = runner.invoke(cli, ["operators", "create", "dana", "--role", "viewer"])
        assert again.exit_code == 1 and "exists already" in again.output
        bad = runner.invoke(cli, ["operators", "create", "Dana!", "--role", "viewer"])
        assert bad.exit_code == 1 and "[a-z0-9_.-]" in bad.output
        no_tenant = runner.invoke(cli, ["operators", "create", "erin", "--role", "viewer", "--tenant", "nobody"])
        assert no_tenant.exit_code == 1 and "no tenant 'nobody'" in no_tenant.output
        listed = runner.invoke(cli, ["operators", "list"])
        assert "dana" in listed.output and "approver" in listed.output and token not in listed.output
        disabled = runner.invoke(cli, ["operators", "disable", "dana"])
        assert disabled.exit_code == 0 and "disabled" in disabled.output
        assert "disabled" in runner.invoke(cli, ["operators", "list"]).output
    finally:
        patch.undo()
        root.handlers[:] = handlers
        root.setLevel(level)


def test_signing_in_sets_a_strict_http_only_session_cookie_and_every_step_is_audited(console: Console) -> None:
    browser = console.browser()
    assert browser.get("/ops").status_code == 303  # not signed in: to the sign-in form
    assert browser.get("/ops").headers["location"].startswith("/ops/login?next=")
    form = browser.get("/ops/login")
    assert form.status_code == 200 and 'name="name"' in form.text and 'name="token"' in form.text
    wrong = browser.post("/ops/login", data={"name": "bob", "token": "pco_not-a-token"})
    assert wrong.status_code == 401 and "not a valid operator token" in wrong.text
    assert 'name="name" value="bob"' in wrong.text  # the name typed is kept, never the token
    signed = browser.post("/ops/login", data={"name": "bob", "token": console.tokens["bob"], "next": "/ops/payments"})
    assert (signed.status_code, signed.headers["location"]) == (303, "/ops/payments")
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith("paycore_ops=pcs_")
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/ops"):
        assert attribute.lower() in cookie.lower(), cookie
    assert "secure" not in cookie.lower()  # the test server is not bound to a public address
    page = browser.get("/ops")
    assert page.status_code == 200 and "bob · approver" in page.text
    out = act(browser, "/ops/logout")
    assert (out.status_code, out.headers["location"]) == (303, "/ops/login")
    assert browser.get("/ops").status_code == 303  # the session ended
    assert audit_types(console) == [
        ("operator.created", "created", "local"),
        ("operator.created", "created", "local"),
        ("operator.created", "created", "local"),
        ("operator.created", "created", "local"),
        ("operator.login_failed", "failed", "anonymous"),
        ("operator.login", "succeeded", "operator:bob"),
        ("operator.logout", "succeeded", "operator:bob"),
    ]


def test_five_failed_sign_ins_for_one_name_from_one_address_block_that_name_there_for_a_minute(
    console: Console,
) -> None:
    browser = console.browser()
    for _ in range(5):
        assert browser.post("/ops/login", data={"name": "bob", "token": "pco_wrong"}).status_code == 401
    blocked = browser.post("/ops/login", data={"name": "bob", "token": console.tokens["bob"]})  # even the right token
    assert blocked.status_code == 429 and "for this name from this address" in blocked.text
    assert 1 <= int(blocked.headers["retry-after"]) <= 60
    assert "paycore_ops" not in blocked.headers.get("set-cookie", "")


def test_the_block_lifts_after_its_window(env: Env, console: Console) -> None:
    # A window long enough for five refused sign-ins and the blocked one on a loaded machine
    # (with 400 ms, CI at c5b7724 saw the window pass before the sixth: 303, not 429).
    window_ms = 2_000
    settings = replace(env.settings, ops_sign_in_window_ms=window_ms)
    with TestClient(create_app(settings, env.database, env.processor), follow_redirects=False) as browser:
        for _ in range(5):
            browser.post("/ops/login", data={"name": "bob", "token": "pco_wrong"})
        assert browser.post("/ops/login", data={"name": "bob", "token": console.tokens["bob"]}).status_code == 429
        time.sleep(window_ms / 1000 + 0.1)
        assert browser.post("/ops/login", data={"name": "bob", "token": console.tokens["bob"]}).status_code == 303


def test_a_session_ends_when_idle_too_long_too_old_or_its_operator_is_disabled(env: Env, console: Console) -> None:
    from paycore.kit.clock import now_us
    from paycore.operators import service as operators

    idle = replace(env.settings, ops_session_idle_ms=300)
    with TestClient(create_app(idle, env.database, env.processor), follow_redirects=False) as browser:
        browser.post("/ops/login", data={"name": "bob", "token": console.tokens["bob"]})
        assert browser.get("/ops").status_code == 200
        time.sleep(0.4)
        assert browser.get("/ops").status_code == 303
    old = replace(env.settings, ops_session_max_ms=300)
    with TestClient(create_app(old, env.database, env.processor), follow_redirects=False) as browser:
        browser.post("/ops/login", data={"name": "bob", "token": console.tokens["bob"]})
        time.sleep(0.4)
        assert browser.get("/ops").status_code == 303
    browser = console.signed_in("carol")
    assert browser.get("/ops").status_code == 200
    env.database.transaction(lambda c: operators.disable_operator(c, "carol", now_us=now_us()))
    assert browser.get("/ops").status_code == 303  # at once
    assert browser.post("/ops/login", data={"name": "carol", "token": console.tokens["carol"]}).status_code == 401


def test_a_tenant_api_key_never_opens_the_console(console: Console) -> None:
    key = {"Authorization": f"Bearer {console.api_key}"}
    browser = console.browser()
    for path in ("/ops", "/ops/payments", "/ops/in-doubt", "/ops/approvals"):
        response = browser.get(path, headers=key)
        assert response.status_code in (303, 401) and "paycore ops</a>" not in response.text, path
    action = browser.post("/ops/refunds/rf_x/approve", headers=key, data={"csrf_token": "x"})
    assert action.status_code == 401
    assert browser.post("/ops/login", data={"name": "bob", "token": console.api_key}).status_code == 401  # no token


def test_local_mode_opens_the_console_without_signing_in_as_local(client: TestClient) -> None:
    page = client.get("/ops")
    assert page.status_code == 200 and "local · approver" in page.text
    assert client.get("/ops/login", follow_redirects=False).status_code == 303  # nobody signs in


def test_an_action_without_its_csrf_token_is_403_and_changes_nothing(console: Console) -> None:
    env = console.env
    env.faults({"fault": "drop_response", "next_n": 1})
    payment = env.pay(env.account()).json()
    browser = console.signed_in("alice")
    for token in (None, "", "0" * 64, csrf_of(console.signed_in("bob"))):  # none, empty, forged, another's
        data = {} if token is None else {"csrf_token": token}
        refused = browser.post(f"/ops/in-doubt/payment/{payment['id']}/ask", data=data)
        assert refused.status_code == 403, token
    events = env.client.get(f"/v1/payments/{payment['id']}/events").json()["data"]
    assert not [e for e in events if e["type"] == "payment.asked_again"]
    done = act(browser, f"/ops/in-doubt/payment/{payment['id']}/ask")
    assert done.status_code == 303
    events = env.client.get(f"/v1/payments/{payment['id']}/events").json()["data"]
    [asked] = [e for e in events if e["type"] == "payment.asked_again"]
    assert asked["actor"] == "operator:alice"


def test_a_csrf_token_in_any_script_is_403_not_500(console: Console) -> None:
    """`hmac.compare_digest` raises TypeError on a str outside ASCII: a form's token is compared
    as bytes, so a token of any characters is just not the session's."""
    browser = console.signed_in("alice")
    for token in ("\u0661" * 64, "é", "\U0001f600", csrf_of(browser) + "²"):
        refused = browser.post("/ops/refunds/rf_x/approve", data={"csrf_token": token})
        assert refused.status_code == 403, (token, refused.text[:300])


def test_a_form_field_holding_a_nul_is_400_and_reaches_no_database(console: Console) -> None:
    """PostgreSQL text cannot hold NUL (the API refuses it in JSON and in every query string): a
    console form is refused before its handler, as any other form it cannot read."""
    browser = console.signed_in("alice")
    token = csrf_of(browser)
    for path, data in (
        ("/ops/events/ev_x/redeliver", {"csrf_token": token, "tenant_id": "\x00"}),
        ("/ops/reconciliation/breaks/brk_x/resolve", {"csrf_token": token, "note": "a\x00b", "resolution": "x"}),
        ("/ops/login", {"name": "bob\x00", "token": console.tokens["bob"]}),
    ):
        refused = browser.post(path, data=data)
        assert refused.status_code == 400 and "NUL" in refused.text, (path, refused.status_code, refused.text[:300])


def test_roles_limit_what_each_person_may_do(console: Console) -> None:
    env = console.env
    env.faults({"fault": "drop_response", "next_n": 1})
    payment = env.pay(env.account()).json()
    viewer = console.signed_in("vic")
    assert viewer.get(f"/ops/payments/{payment['id']}").status_code == 200  # reads every page
    refused = act(viewer, f"/ops/in-doubt/payment/{payment['id']}/ask")
    assert refused.status_code == 403 and "needs the role operator" in refused.text
    operator = console.signed_in("alice")
    assert act(operator, f"/ops/in-doubt/payment/{payment['id']}/ask").status_code == 303
    assert act(operator, "/ops/refunds/rf_nothing/approve").status_code == 403  # needs an approver
