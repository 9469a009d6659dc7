"""Reconciling the sandbox processor's real settlement report against paycore (issue 20), on
both databases: what matches, each break this step stores, an in-doubt payment the report
resolves through its lifecycle, re-runs that change nothing, and files that are not reports."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner, Result

from paycore.cli.main import app
from paycore.kit import clock
from paycore.ledger.verify import verify
from paycore.reconciliation import queries as reconciliation_queries
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.models import reconciliation_breaks, reconciliation_runs
from paycore.reconciliation.report import HEADER, NotAReport
from paycore.reconciliation.service import CAUSE
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support as payouts
from tests.support.payouts import books_ok, funded_source

TENANT = "default"


@pytest.fixture
def transport() -> str:
    return "inprocess"


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def report(env: Env) -> list[str]:
    """Today's report as the sandbox writes it."""
    return list(env.processor.settlement_report(today()))


def changed(lines: list[str], request_id: str, **values: str) -> list[str]:
    """The report with the fields of `request_id`'s line replaced (a wrong report)."""
    out = []
    for text in lines:
        fields = text.rstrip("\r\n").split(",")
        if fields[1] == request_id:
            for name, value in values.items():
                fields[HEADER.index(name)] = value
            text = ",".join(fields) + "\r\n"
        out.append(text)
    return out


def paid(env: Env, token: str = "tok_ok", amount_minor: int = 2500) -> dict[str, Any]:
    response = env.pay(env.account(f"m-{token}-{amount_minor}"), token=token, amount_minor=amount_minor)
    assert response.status_code in (201, 202, 402), response.text
    return dict(response.json())


def breaks(env: Env, tenant_id: str = TENANT) -> list[dict[str, Any]]:
    with env.database.read() as connection:
        return reconciliation_queries.breaks_of(connection, tenant_id)


def counts(env: Env) -> tuple[int, int]:
    with env.database.read() as connection:
        runs = connection.execute(select(func.count()).select_from(reconciliation_runs)).scalar_one()
        found = connection.execute(select(func.count()).select_from(reconciliation_breaks)).scalar_one()
    return int(runs), int(found)


def test_a_report_that_agrees_matches_every_line_and_stores_its_run(env: Env) -> None:
    paid(env)
    paid(env, token="tok_declined", amount_minor=700)
    lines = report(env)

    summary = reconciliation.reconcile(env.database, lines)

    assert (summary.day, summary.lines_read, summary.matched, summary.resolved) == (today(), 2, 2, 0)
    assert not summary.breaks and breaks(env) == []
    with env.database.read() as connection:
        run = reconciliation_queries.run(connection, summary.run_id)
    assert run is not None
    assert (run["status"], run["day"], run["lines_read"], run["matched"], run["breaks_found"]) == (
        "completed",
        today(),
        2,
        2,
        0,
    )
    assert len(run["report_sha256"]) == 64


def test_an_in_doubt_payment_is_resolved_by_the_report_through_its_lifecycle(env: Env) -> None:
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["charge"]})
    payment = paid(env)
    assert payment["status"] == "in_doubt"

    summary = reconciliation.reconcile(env.database, report(env))

    assert (summary.matched, summary.resolved) == (1, 1)
    shown = env.client.get(f"/v1/payments/{payment['id']}").json()
    assert shown["status"] == "succeeded"
    assert [(step["from"], step["to"], step["cause"]) for step in shown["history"]][-1] == (
        "in_doubt",
        "succeeded",
        "settlement_report",
    )
    with env.database.read() as connection:
        assert verify(connection).ok
    again = reconciliation.reconcile(env.database, report(env))
    assert (again.matched, again.resolved, sum(again.breaks.values())) == (1, 0, 0)


def test_a_report_never_overrides_a_final_status_it_contradicts(env: Env) -> None:
    declined = paid(env, token="tok_declined", amount_minor=700)
    assert declined["status"] == "failed"
    lines = changed(report(env), declined["id"], status="succeeded")

    summary = reconciliation.reconcile(env.database, lines)

    assert dict(summary.breaks) == {"status_mismatch": 1} and summary.resolved == 0
    assert env.client.get(f"/v1/payments/{declined['id']}").json()["status"] == "failed"
    (found,) = breaks(env)
    assert (found["type"], found["status"], found["object_type"], found["object_id"], found["object_status"]) == (
        "status_mismatch",
        "open",
        "payment",
        declined["id"],
        "failed",
    )
    assert json.loads(found["line"])[HEADER.index("status")] == "succeeded"
    assert found["run_id"] == summary.run_id and found["line_number"] == 2


def test_another_amount_and_money_paycore_never_saw_are_breaks(env: Env) -> None:
    payment = paid(env)
    lines = changed(report(env), payment["id"], amount_minor="2400")
    unknown = f"charge,pay_NOTOURS,ch_NOTOURS,{TENANT},5000,175,USD,succeeded,{today()}T10:00:00.000000Z,,\r\n"

    summary = reconciliation.reconcile(env.database, [*lines, unknown])

    assert dict(summary.breaks) == {"amount_mismatch": 1, "missing_in_paycore": 1}
    by_type = {item["type"]: item for item in breaks(env)}
    assert by_type["amount_mismatch"]["detail"] == "report 2400, paycore 2500"
    assert (by_type["missing_in_paycore"]["object_id"], by_type["missing_in_paycore"]["line_number"]) == (None, 3)


def test_a_malformed_line_is_a_break_with_its_number_and_the_other_lines_still_count(env: Env) -> None:
    paid(env)
    lines = report(env)
    bad = f"charge,pay_X,ch_X,{TENANT},12.5,0,USD,succeeded,{today()}T10:00:00.000000Z,,\r\n"

    summary = reconciliation.reconcile(env.database, [lines[0], bad, *lines[1:]])

    assert (summary.lines_read, summary.matched, dict(summary.breaks)) == (2, 1, {"malformed_line": 1})
    (found,) = breaks(env)
    assert (found["line_number"], found["detail"]) == (2, "amount_minor '12.5' is not a whole number of minor units")


def test_running_the_same_report_again_stores_nothing_new_and_moves_nothing(env: Env) -> None:
    declined = paid(env, token="tok_declined", amount_minor=700)
    lines = changed(report(env), declined["id"], status="succeeded")
    reconciliation.reconcile(env.database, lines)
    first = breaks(env)

    again = reconciliation.reconcile(env.database, lines)

    assert (sum(again.breaks.values()), again.resolved) == (0, 0)
    seen_again = [{**found, "seen_run_id": again.run_id} for found in first]  # the run met it again
    assert breaks(env) == seen_again
    assert counts(env) == (2, 1)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "the report is empty"),
        (["id,amount\r\n", "1,2\r\n"], "not a settlement report's header"),
    ],
)
def test_what_is_not_a_report_is_refused_and_nothing_is_written(env: Env, lines: list[str], message: str) -> None:
    with pytest.raises(NotAReport, match=message):
        reconciliation.reconcile(env.database, lines)
    assert counts(env) == (0, 0)


def test_one_tenant_never_sees_another_ones_breaks(env: Env) -> None:
    declined = paid(env, token="tok_declined", amount_minor=700)
    reconciliation.reconcile(env.database, changed(report(env), declined["id"], status="succeeded"))

    assert len(breaks(env)) == 1
    assert breaks(env, "other") == []


def test_a_payout_the_bank_settled_is_settled_by_the_report_with_its_fee(env: Env) -> None:
    """The bank's webhook never came: the report's settlement line moves the payout, through
    the same code as the webhook (its fee adjustment included)."""
    source = funded_source(env.database, payouts.TENANT, 10_000)
    payout = payouts.schedule(env, payouts.ach(source))
    assert payouts.queue_and_send(env) == 1
    payouts.bank_finishes(env, deliver=False)
    assert payouts.get(env, payout["id"])["status"] == "sent"
    days = sorted({today(), clock.utc_day(clock.now_us() + payouts.BANK_DONE_MS * 1_000).isoformat()})
    lines = [text for day in days for text in env.processor.settlement_report(day)]
    lines = lines[:1] + [text for text in lines[1:] if not text.startswith("type,")]

    summary = reconciliation.reconcile(env.database, lines, day=days[0])

    assert (summary.resolved, dict(summary.breaks)) == (1, {})
    settled = payouts.get(env, payout["id"])
    assert settled["status"] == "settled"
    assert [(h["from"], h["to"], h["cause"]) for h in settled["history"]][-1] == ("sent", "settled", CAUSE)
    assert [(a["kind"], a["amount_minor"]) for a in settled["adjustments"]] == [("fee", 25)]
    assert books_ok(env.database)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"fault": "report_amount_delta", "amount_delta_minor": -100}, "amount_mismatch"),
        ({"fault": "report_status"}, "status_mismatch"),
        ({"fault": "report_unknown_charge"}, "missing_in_paycore"),
    ],
)
def test_each_report_fault_of_the_sandbox_is_found_as_its_break(env: Env, rule: dict[str, Any], expected: str) -> None:
    """End to end: the sandbox's report is wrong on purpose (its fault plan), paycore finds it."""
    env.sandbox.set_fault_plan({"seed": 1, "rules": [{**rule, "next_n": 1, "ops": ["charge"]}]})
    payment = paid(env)
    assert payment["status"] == "succeeded"

    summary = reconciliation.reconcile(env.database, report(env))

    assert dict(summary.breaks) == {expected: 1} and summary.resolved == 0
    assert env.client.get(f"/v1/payments/{payment['id']}").json()["status"] == "succeeded"


def metric_lines(env: Env, name: str) -> list[str]:
    text = env.client.get("/metrics").text
    return [line for line in text.splitlines() if line.startswith(name)]


def test_metrics_count_breaks_by_type_and_status_and_items_the_reports_resolved(env: Env) -> None:
    assert 'paycore_reconciliation_breaks{status="open",type="status_mismatch"} 0.0' in metric_lines(
        env, "paycore_reconciliation_breaks"
    )
    assert metric_lines(env, "paycore_reconciliation_last_run_age_seconds") == []
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["charge"]})
    paid(env)
    declined = paid(env, token="tok_declined", amount_minor=700)

    reconciliation.reconcile(env.database, changed(report(env), declined["id"], status="succeeded"))

    breaks_now = metric_lines(env, "paycore_reconciliation_breaks{")
    assert 'paycore_reconciliation_breaks{status="open",type="status_mismatch"} 1.0' in breaks_now
    assert len(breaks_now) == 11 * 3  # every type and status (open, resolved, superseded), 0 where there is none
    assert metric_lines(env, "paycore_reconciliation_items_resolved_total") == [
        "paycore_reconciliation_items_resolved_total 1.0"
    ]
    (age,) = metric_lines(env, "paycore_reconciliation_last_run_age_seconds ")
    assert float(age.split()[1]) >= 0


# --- the command line -----------------------------------------------------------------------


def run_cli(env: Env, *arguments: str, stdin: str | None = None) -> Result:
    variables = {"PAYCORE_DATABASE_URL": env.settings.database_url, "COLUMNS": "200"}
    return CliRunner().invoke(app, ["reconcile", *arguments], env=variables, input=stdin, catch_exceptions=False)


def test_the_command_reconciles_a_file_or_standard_input_and_sums_up(env: Env, tmp_path: Path) -> None:
    declined = paid(env, token="tok_declined", amount_minor=700)
    paid(env)
    path = tmp_path / "report.csv"
    path.write_text("".join(changed(report(env), declined["id"], status="succeeded")), newline="")

    result = run_cli(env, "--report", str(path))

    assert result.exit_code == 0, result.output
    assert f"for {today()}" in result.stdout
    assert "lines read 2, matched 1, resolved 0" in result.stdout
    assert "new breaks: status_mismatch 1" in result.stdout
    again = run_cli(env, "--report", "-", "--day", today(), stdin=path.read_text())
    assert again.exit_code == 0, again.output
    assert "new breaks: none" in again.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("id,amount\n1,2\n", "is not a settlement report"), ("", "is not a settlement report")],
)
def test_the_command_refuses_what_it_cannot_read_in_one_line(
    env: Env, tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "report.csv"
    if content is not None:
        path.write_text(content)

    result = run_cli(env, "--report", str(path))

    assert result.exit_code == 1
    assert message in result.stderr and "Traceback" not in result.output
    said = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("{")]  # no logs
    assert len(said) == 1, result.stderr
    assert counts(env) == (0, 0)


def test_the_command_needs_a_report_or_a_day_and_a_real_day(env: Env) -> None:
    assert run_cli(env).exit_code == 2
    result = run_cli(env, "--report", "-", "--day", "2024-13-01", stdin="")
    assert result.exit_code == 2 and "--day" in result.stderr
