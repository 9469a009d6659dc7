"""The metrics of issue 28 §4 and what watches them (deploy/): every metric the alert rules and
the dashboard use is in `/metrics`, and each alerted metric moves when its condition is made
for real — an item left due with no worker, an in-doubt payment from the sandbox, a wrong
settlement report reconciled — on both databases. Time is moved by writing the timestamps a
condition is measured from, never by mocking the clock or the database."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from paycore.kit.clock import now_us
from paycore.monitoring import service as monitoring
from paycore.reconciliation import queries as reconciliation_queries
from tests.integration.payments.conftest import Env, env, processor, sandbox
from tests.integration.reconciliation.test_http import one_break, resolve, wrong_report
from tests.integration.refunds import support as refunds

__all__ = ["env", "processor", "sandbox"]

METRIC_NAME = re.compile(r"paycore_[a-z_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
SECOND_US = 1_000_000
LATE_S = 600  # how far back a test moves the time a condition is measured from
NEVER_RECONCILED = ("reconcile_days",)  # a new database's closed days have no run yet: due, late
Labels = frozenset[tuple[str, str]]


@pytest.fixture
def transport() -> str:
    return "inprocess"  # the metrics do not depend on the transport in front of the sandbox


# --- reading /metrics --------------------------------------------------------------------------


def samples(client: TestClient) -> dict[str, dict[Labels, float]]:
    """Every sample of one scrape: name -> labels -> value."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    found: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return found


def by(client: TestClient, name: str, label: str) -> dict[str, int]:
    """One metric with a single label, as {label value: value}; gauges of seconds are whole."""
    values = samples(client)[name]
    assert all(value == int(value) for value in values.values()), values
    return {dict(labels)[label]: int(value) for labels, value in values.items()}


def value(client: TestClient, name: str, **labels: str) -> int:
    found = samples(client)[name][frozenset(labels.items())]
    assert found == int(found)
    return int(found)


def move_back(env: Env, table: str, columns: tuple[str, ...], seconds: int, **where: str) -> None:
    """Make a row look `seconds` older: what the clock would have done (real SQL, real database)."""
    assert table in ("payments", "refunds", "reconciliation_breaks") and where
    sets = ", ".join(f"{column} = {column} - :by_us" for column in columns)
    condition = " AND ".join(f"{column} = :{column}" for column in where)
    with env.database.engine.connect() as connection, connection.begin():
        moved = connection.execute(
            text(f"UPDATE {table} SET {sets} WHERE {condition}"), {"by_us": seconds * SECOND_US, **where}
        )
        assert moved.rowcount >= 1


# --- what deploy/ uses exists ------------------------------------------------------------------


def alert_expressions(repo_root: Path) -> Iterator[str]:
    rules = yaml.safe_load((repo_root / "deploy/prometheus/alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield str(rule["expr"])


def dashboard_expressions(repo_root: Path) -> Iterator[str]:
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))  # a collapsed row holds its panels

    dashboard = json.loads((repo_root / "deploy/grafana/paycore.json").read_text())
    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield str(target["expr"])


def test_every_metric_the_alerts_and_the_dashboard_use_is_exposed(client: TestClient, repo_root: Path) -> None:
    response = client.get("/metrics")
    families = list(text_string_to_metric_families(response.text))
    exposed = {sample.name for family in families for sample in family.samples}
    histograms = {family.name for family in families if family.type == "histogram"}
    alerts = list(alert_expressions(repo_root))
    panels = list(dashboard_expressions(repo_root))
    assert len(alerts) >= 6 and len(panels) >= 11

    used = set()
    for name in (found for expression in [*alerts, *panels] for found in METRIC_NAME.findall(expression)):
        stem = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.removesuffix(s) in histograms), None)
        used.add(stem or name)

    assert used - exposed - histograms == set()
    assert "paycore_http_request_duration_seconds" in used and "paycore_worker_lag_seconds" in used
    assert len(used) >= 10


def test_the_dashboard_shows_the_open_authorizations_with_unique_panel_ids(repo_root: Path) -> None:
    shown = {name for expression in dashboard_expressions(repo_root) for name in METRIC_NAME.findall(expression)}
    assert {"paycore_authorizations_open", "paycore_authorization_oldest_age_seconds"} <= shown  # issue 40 point 4
    dashboard = json.loads((repo_root / "deploy/grafana/paycore.json").read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), ids  # Grafana keys a panel by its id


def test_a_fresh_app_reports_every_label_at_zero_but_the_days_never_reconciled(client: TestClient) -> None:
    lag = by(client, "paycore_worker_lag_seconds", "job")
    assert set(lag) == set(monitoring.JOBS)
    # A new database has no completed run for the closed days of the lookback window: those are
    # due, late since the oldest of them ended (a worker reconciles them on its first round).
    assert {job for job, seconds in lag.items() if seconds > 0} == set(NEVER_RECONCILED)
    assert by(client, "paycore_escaped_money_defects_total", "kind") == dict.fromkeys(monitoring.DEFECT_KINDS, 0)
    assert by(client, "paycore_reconciliation_break_oldest_age_seconds", "type") == dict.fromkeys(
        reconciliation_queries.BREAK_TYPES, 0
    )
    assert by(client, "paycore_in_doubt_items", "kind") == dict.fromkeys(monitoring.KINDS, 0)
    assert by(client, "paycore_in_doubt_oldest_age_seconds", "kind") == dict.fromkeys(monitoring.KINDS, 0)
    assert value(client, "paycore_duplicate_money_movements_total") == 0


# --- each alerted metric moves with its condition ----------------------------------------------


def test_a_refund_due_with_no_worker_running_shows_as_send_refunds_lag(env: Env) -> None:
    _, payment = refunds.paid(env)
    refund = refunds.created(env, payment, 300)
    assert refund["status"] == "pending"
    # Due when it was made; no worker ran for ten minutes since.
    move_back(env, "refunds", ("next_attempt_at_us",), LATE_S, id=refund["id"])

    lag = by(env.client, "paycore_worker_lag_seconds", "job")

    assert LATE_S <= lag["send_refunds"] < LATE_S + 60
    assert {job for job, seconds in lag.items() if seconds > 0} == {"send_refunds", *NEVER_RECONCILED}
    # A worker round takes it: nothing is late any more.
    assert refunds.send(env) == 1
    assert by(env.client, "paycore_worker_lag_seconds", "job")["send_refunds"] == 0


def test_a_payment_in_doubt_shows_its_count_its_age_and_the_resolver_lag(env: Env) -> None:
    response = env.pay(env.account(), token="tok_timeout")  # taken, but the answer never comes
    assert (response.status_code, response.json()["status"]) == (202, "in_doubt")
    payment_id = response.json()["id"]
    assert by(env.client, "paycore_in_doubt_items", "kind") == {"payment": 1, "refund": 0, "payout": 0}
    # In doubt for two hours, and the resolver should have asked about it ten minutes ago.
    move_back(env, "payments", ("in_doubt_since_us",), 2 * 3600, id=payment_id)
    move_back(env, "payments", ("next_attempt_at_us",), LATE_S, id=payment_id)

    ages = by(env.client, "paycore_in_doubt_oldest_age_seconds", "kind")
    lag = by(env.client, "paycore_worker_lag_seconds", "job")

    assert 2 * 3600 <= ages["payment"] < 2 * 3600 + 60  # past PaycoreInDoubtOld's hour
    assert ages["refund"] == ages["payout"] == 0
    assert LATE_S <= lag["resolve_payments"] < LATE_S + 60
    # The resolver asks the sandbox, which took the charge: no longer in doubt, nothing late.
    assert env.resolve() == 1
    assert env.client.get(f"/v1/payments/{payment_id}").json()["status"] == "succeeded"
    assert by(env.client, "paycore_in_doubt_items", "kind")["payment"] == 0
    assert by(env.client, "paycore_in_doubt_oldest_age_seconds", "kind")["payment"] == 0
    assert by(env.client, "paycore_worker_lag_seconds", "job")["resolve_payments"] == 0


def test_a_wrong_settlement_report_shows_as_escaped_defects_and_open_break_age(env: Env) -> None:
    before = now_us()
    wrong_report(env)  # amount_mismatch in two tenants, a status_mismatch, a missing_in_paycore
    move_back(env, "reconciliation_breaks", ("created_at_us",), 3600, type="amount_mismatch")

    defects = by(env.client, "paycore_escaped_money_defects_total", "kind")
    ages = by(env.client, "paycore_reconciliation_break_oldest_age_seconds", "type")

    expected = dict.fromkeys(monitoring.DEFECT_KINDS, 0) | {
        "amount_mismatch": 2,
        "status_mismatch": 1,
        "missing_in_paycore": 1,
    }
    assert defects == expected
    assert 3600 <= ages["amount_mismatch"] < 3600 + 60
    assert 0 <= ages["status_mismatch"] <= (now_us() - before) // SECOND_US  # found just now
    assert value(env.client, "paycore_duplicate_money_movements_total") == 0  # nothing moved twice

    # Resolved, a break is no longer open, but the defect stays found (the count never decreases).
    found = one_break(env, "status_mismatch")
    assert resolve(env, found["id"], {"resolution": "accepted"}, "resolve-metrics").status_code == 200

    assert by(env.client, "paycore_escaped_money_defects_total", "kind") == expected
    assert by(env.client, "paycore_reconciliation_break_oldest_age_seconds", "type")["status_mismatch"] == 0
    assert value(env.client, "paycore_reconciliation_breaks", type="status_mismatch", status="open") == 0
    assert value(env.client, "paycore_reconciliation_breaks", type="status_mismatch", status="resolved") == 1
    assert value(env.client, "paycore_reconciliation_breaks", type="amount_mismatch", status="open") == 2
