"""`paycore simulate`: every scenario of SPEC §8 on both transports, chaos with a fixed seed,
and proof that the invariant check can fail."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from paycore.cli.main import app
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


def test_cli_runs_scenarios_and_exits_non_zero_on_unknown_names() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", "--quiet", "success", "over-refund-rejected"])
    assert result.exit_code == 0, result.output
    assert "PASS success (inprocess)" in result.output
    bad = runner.invoke(app, ["simulate", "no-such-scenario"])
    assert bad.exit_code != 0
