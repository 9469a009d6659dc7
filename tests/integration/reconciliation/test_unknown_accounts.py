"""Issue 29 item 5, on both databases: a report line whose merchant is not a tenant of paycore
(unknown, or one that differs only by case from a tenant) is one `unknown_account` break under
the run's own scope (`*`, as the run), with the line as its evidence. No row of any table ever
names a tenant that does not exist: not a break, not its audit event, not a staging row.

Tenants exist once `paycore tenants create` made them (here: `acme`, with its API key). In local
mode there is no list of tenants (every tenant id is one a request may act as), so there every
well-formed merchant id is taken as the tenant it names, as before.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Table, select

from paycore.audit.models import events
from paycore.kit.clock import now_us
from paycore.operators import service as operators
from paycore.reconciliation import queries as reconciliation_queries
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.models import ALL_TENANTS, reconciliation_breaks, reconciliation_seen
from paycore.reconciliation.report import HEADER
from paycore.tenants import service as tenants
from tests.integration.payments.conftest import Env
from tests.integration.reconciliation.test_reconcile import changed, paid, report, today

TENANT = "acme"


@pytest.fixture
def transport() -> str:
    return "inprocess"


@pytest.fixture
def keyed(env: Env) -> Env:
    """Tenant `acme` made with `paycore tenants create`; the API client is acme's key."""
    made = env.database.transaction(lambda connection: tenants.create_tenant(connection, TENANT, now_us=now_us()))
    env.client.headers["Authorization"] = f"Bearer {made.api_key}"
    return env


def tenants_named(env: Env, table: Table) -> set[str]:
    with env.database.read() as connection:
        return set(connection.execute(select(table.c.tenant_id).distinct()).scalars())


def run_breaks(env: Env) -> list[dict[str, Any]]:
    with env.database.read() as connection:
        query = select(reconciliation_breaks).order_by(reconciliation_breaks.c.line_number)
        return [dict(row._mapping) for row in connection.execute(query)]


def test_a_line_for_no_tenant_or_a_tenant_in_another_case_is_one_unknown_account_break_of_the_run(
    keyed: Env,
) -> None:
    env = keyed
    payment = paid(env)
    lines = report(env)  # the header, then acme's payment: it matches
    ghost = f"charge,pay_GHOST,ch_GHOST,ghost,5000,175,USD,succeeded,{today()}T10:00:00.000000Z,,\r\n"
    other_case = changed(lines, payment["id"], merchant_id="ACME")[1]  # acme's own line, merchant in capitals
    ghost_refund = f"refund,rf_GHOST,re_GHOST,ghost,100,0,USD,failed,{today()}T10:00:01.000000Z,,\r\n"
    malformed = f"charge,pay_BAD,ch_BAD,ghost,12.5,0,USD,succeeded,{today()}T10:00:02.000000Z,,\r\n"

    summary = reconciliation.reconcile(env.database, [*lines, ghost, other_case, ghost_refund, malformed])

    assert (summary.lines_read, summary.matched) == (5, 1)
    assert dict(summary.breaks) == {"unknown_account": 3, "malformed_line": 1}
    found = run_breaks(env)
    assert [(row["tenant_id"], row["type"], row["line_number"]) for row in found] == [
        (ALL_TENANTS, "unknown_account", 3),
        (ALL_TENANTS, "unknown_account", 4),
        (ALL_TENANTS, "unknown_account", 5),
        (ALL_TENANTS, "malformed_line", 6),
    ]
    assert all(row["run_id"] == summary.run_id and row["status"] == "open" for row in found)
    assert all(row["object_type"] is None and row["object_id"] is None for row in found)
    assert json.loads(found[0]["line"]) == ghost.rstrip("\r\n").split(",")
    assert json.loads(found[1]["line"])[HEADER.index("merchant_id")] == "ACME"
    assert found[0]["detail"] == "merchant 'ghost' is not a tenant of paycore"
    assert (
        found[1]["detail"]
        == "merchant 'ACME' is not a tenant of paycore (tenant ids are case-sensitive: 'acme' is one)"
    )
    for table in (reconciliation_breaks, reconciliation_seen, events):
        assert tenants_named(env, table) <= {TENANT, ALL_TENANTS}, table.name
    assert env.client.get("/v1/reconciliation/breaks").json()["data"] == []  # acme has none
    assert env.client.get(f"/v1/payments/{payment['id']}").json()["status"] == "succeeded"

    again = reconciliation.reconcile(env.database, [*lines, ghost, other_case, ghost_refund, malformed])
    assert dict(again.breaks) == {} and len(run_breaks(env)) == 4  # met again, stored once


def signed_in(env: Env, name: str, tenant: str | None) -> TestClient:
    """A browser signed in to the console as a new operator (of every tenant, or of `tenant`)."""
    made = env.database.transaction(
        lambda connection: operators.create_operator(connection, name, "operator", tenant_id=tenant, now_us=now_us())
    )
    browser = TestClient(env.client.app, follow_redirects=False)
    assert browser.post("/ops/login", data={"name": name, "token": made.token}).status_code == 303
    return browser


def test_unknown_account_is_a_break_type_of_the_api_metrics_and_console(keyed: Env) -> None:
    env = keyed
    ghost = f"charge,pay_GHOST,ch_GHOST,ghost,5000,175,USD,succeeded,{today()}T10:00:00.000000Z,,\r\n"
    reconciliation.reconcile(env.database, [report(env)[0], ghost])
    (found,) = run_breaks(env)

    assert "unknown_account" in reconciliation_queries.BREAK_TYPES
    refused = env.client.get("/v1/reconciliation/breaks?type=nonsense").json()
    assert "unknown_account" in refused["message"]
    assert env.client.get("/v1/reconciliation/breaks?type=unknown_account").json()["data"] == []  # not acme's
    schema = env.client.get("/openapi.json").json()
    parameters = schema["paths"]["/v1/reconciliation/breaks"]["get"]["parameters"]
    (type_filter,) = [parameter for parameter in parameters if parameter["name"] == "type"]
    assert "unknown_account" in json.dumps(type_filter["schema"])
    metrics = env.client.get("/metrics").text
    assert 'paycore_reconciliation_breaks{status="open",type="unknown_account"} 1.0' in metrics
    assert 'paycore_escaped_money_defects_total{kind="unknown_account"}' not in metrics  # a report's fault

    platform = signed_in(env, "alice", None)
    page = platform.get("/ops/reconciliation", params={"type": "unknown_account"}).text
    assert '<option value="unknown_account" selected>' in page
    assert f"<code>{found['id']}</code></a></td><td>unknown_account</td>" in page
    assert f"<td>{ALL_TENANTS}</td>" in page
    evidence = platform.get(f"/ops/reconciliation/breaks/{found['id']}").text
    assert "merchant &#39;ghost&#39; is not a tenant of paycore" in evidence
    acme_only = signed_in(env, "bob", TENANT).get("/ops/reconciliation", params={"type": "unknown_account"}).text
    assert found["id"] not in acme_only  # a tenant's operator sees the tenant's breaks only
