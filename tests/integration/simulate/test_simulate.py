"""`paycore simulate`: every scenario of SPEC §8 (refunds, and payments and payouts the day's
settlement report resolves) on both transports, chaos with a fixed seed, and proof that the
invariant check can fail."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text
from typer.testing import CliRunner

from paycore.cli.main import app
from paycore.reconciliation.models import reconciliation_runs
from paycore.simulate import driver, invariants, world
from paycore.simulate.scenarios import SCENARIOS, Story

TRANSPORTS = ["inprocess", "http"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_passes(name: str, transport: str) -> None:
    outcome = driver.run(name, transport, seed=1, ops=1)
    assert outcome.passed, "\n".join(outcome.problems + outcome.timeline)
    assert outcome.timeline


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_chaos_with_a_fixed_seed(transport: str) -> None:
    outcome = driver.run("chaos", transport, seed=20261129, ops=300)
    assert outcome.passed, "\n".join(outcome.problems + outcome.timeline[-60:])


def test_the_invariants_catch_a_disagreement() -> None:
    built = world.build("inprocess")
    try:
        story = Story(built)
        story.merchant = built.merchant()
        SCENARIOS["success"](story)
        assert invariants.check(built) == []
        # The processor's record of the amount changes: the two sides now disagree, and it must show.
        engine = create_engine(f"sqlite:///{built.workdir / 'sandbox.db'}")
        with engine.begin() as connection:
            connection.execute(text("UPDATE sandbox_refunds SET amount_minor = 1"))
        engine.dispose()
        problems = invariants.check(built)
        assert any("the processor says succeeded 1" in problem for problem in problems), problems
    finally:
        built.close()


def test_the_invariants_catch_a_payment_or_a_payout_the_sides_disagree_on_and_an_open_break() -> None:
    built = world.build("inprocess")
    try:
        story = Story(built)
        story.merchant = built.merchant()
        SCENARIOS["payout-stuck-in-doubt-reconciled"](story)
        assert invariants.check(built) == []
        engine = create_engine(f"sqlite:///{built.workdir / 'sandbox.db'}")
        with engine.begin() as connection:
            connection.execute(text("UPDATE sandbox_charges SET amount_minor = 999"))
            connection.execute(text("UPDATE sandbox_bank_payouts SET amount_minor = 599"))
        engine.dispose()
        # The world's reports (one day's, or two across midnight) now say other amounts than
        # paycore: breaks, left open.
        breaks = sum((summary.breaks for summary in built.reconcile()), Counter())
        assert dict(breaks) == {"amount_mismatch": 2}

        problems = invariants.check(built)

        assert any("the processor says succeeded 999" in problem for problem in problems), problems
        assert any("paycore paid out 600, the bank 599" in problem for problem in problems), problems
        assert any("(amount_mismatch) left open" in problem for problem in problems), problems
    finally:
        built.close()


@pytest.mark.parametrize("name", ["stuck-in-doubt-reconciled", "payment-stuck-in-doubt-reconciled"])
def test_a_reconciled_scenario_goes_through_the_real_reconciliation_once(name: str) -> None:
    """The reports are reconciled by `paycore.reconciliation` (one run of each of the world's
    days, from the processor: today's, and yesterday's too across midnight), and the worker's
    scheduled job, run in every round, finds no closed day due."""
    built = world.build("inprocess")
    try:
        story = Story(built)
        story.merchant = built.merchant()
        SCENARIOS[name](story)
        with built.database.read() as connection:
            runs = connection.execute(select(reconciliation_runs.c.day, reconciliation_runs.c.source)).all()
        days = sorted(day for day, _ in runs)
        assert sorted(tuple(run) for run in runs) == [(day, "processor") for day in days]
        assert days and days == built.days()[: len(days)]  # each day once, from the world's first
    finally:
        built.close()


def test_cli_runs_scenarios_and_exits_non_zero_on_unknown_names() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", "--quiet", "success", "over-refund-rejected"])
    assert result.exit_code == 0, result.output
    assert "PASS success (inprocess)" in result.output
    bad = runner.invoke(app, ["simulate", "no-such-scenario"])
    assert bad.exit_code != 0


def test_the_help_lists_every_scenario() -> None:
    result = CliRunner().invoke(app, ["simulate", "--help"])
    assert result.exit_code == 0, result.output
    words = set(re.findall(r"[a-z][a-z-]*[a-z]", result.output))
    missing = [name for name in driver.ALL if name not in words]
    assert not missing, (missing, result.output)


def test_the_invariants_catch_an_authorization_the_sides_disagree_on_or_closed_twice() -> None:
    built = world.build("inprocess")
    try:
        story = Story(built)
        story.merchant = built.merchant()
        SCENARIOS["capture-response-lost"](story)
        assert invariants.check(built) == []
        [payment] = [row["id"] for row in built.get("/v1/payments")["data"]]
        engine = create_engine(f"sqlite:///{built.workdir / 'sandbox.db'}")
        with engine.begin() as connection:
            # The processor took 500 of the authorization, not the 600 paycore posted; and a
            # second request (a cancel) closed the same charge again.
            connection.execute(text("UPDATE sandbox_charges SET captured_minor = 500, released_minor = 500"))
            connection.execute(
                text(
                    "INSERT INTO sandbox_charge_actions SELECT request_id || '_again', 'cancel', merchant_id,"
                    " charge_request_id, payment_reference, 1000, currency, created_at_us FROM sandbox_charge_actions"
                )
            )
        engine.dispose()

        problems = invariants.check(built)

        assert any(f"{payment}: paycore says ('succeeded', 600, None)" in problem for problem in problems), problems
        assert any("proves ('succeeded', 500, None)" in problem for problem in problems), problems
        assert any(f"{payment}: closed by 2 requests at the processor (cancel, capture)" in p for p in problems), (
            problems
        )
    finally:
        built.close()


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("paycore")), "simulate", "--quiet", "success", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_log_lines_go_to_a_file_unless_verbose(tmp_path: Path) -> None:
    """The timelines are read by a person: without --verbose the JSON log lines go to a file the
    output names, not among them; with --verbose they go to standard error as any command's do."""
    log_file = tmp_path / "simulate.log"
    quiet = _simulate("--log-file", str(log_file))
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert f"log lines: {log_file}" in quiet.stdout
    assert '"level"' not in quiet.stderr and '"level"' not in quiet.stdout
    logged = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert logged and all("ts" in line for line in logged)

    verbose = _simulate("--verbose")
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    assert "log lines:" not in verbose.stdout
    assert any(line.startswith("{") and '"ts"' in line for line in verbose.stderr.splitlines())


def test_without_a_log_file_one_is_made_and_named() -> None:
    ran = _simulate()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    named = re.findall(r"log lines: (\S+)", ran.stdout)
    assert len(named) == 2 and named[0] == named[1], ran.stdout
    try:
        assert Path(named[0]).read_text().strip()
    finally:
        Path(named[0]).unlink()
