"""`paycore simulate`: the refund flow across the two services, scenario by scenario (SPEC §8),
payments, refunds and payouts left in doubt that the day's settlement report resolves, and
authorizations captured, canceled and expired (SPEC §6.1), and disputes won and lost by
silence (SPEC §6.2). The help lists every scenario
(tests/integration/simulate/test_simulate.py checks it against the driver's)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import typer
from rich.console import Console

from paycore.config import log_options_from_env
from paycore.kit import logs

console = Console()


def simulate(
    scenarios: list[str] = typer.Argument(None, help="Scenarios to run (default: all). `chaos` takes --seed/--ops."),
    transport: str = typer.Option("inprocess", help="inprocess, or http (the sandbox as its own process)."),
    seed: int = typer.Option(1, help="Seed of the chaos scenario."),
    ops: int = typer.Option(200, help="Operations of the chaos scenario.", min=1, max=100_000),
    quiet: bool = typer.Option(False, "--quiet", help="Print only the verdicts, not the timelines."),
    verbose: bool = typer.Option(
        False, "--verbose", help="Log to standard error, among the timelines (else the log lines go to --log-file)."
    ),
    log_file: Path | None = typer.Option(
        None, "--log-file", help="Where the log lines go without --verbose (default: a new file in the temp directory)."
    ),
) -> None:
    """Run the scenarios end to end, print each timeline, check the invariants; exit 1 if any fails.
    The log lines go to a file (named at the start and the end) unless --verbose.

    Refunds (SPEC §8): success, over-refund-rejected, unknown-payment-rejected,
    declined, request-lost, response-lost, timeout-then-retry,
    duplicate-request, concurrent-refunds, callback-confirmation,
    approval-required, chaos.

    Left in doubt, resolved by the settlement report:
    stuck-in-doubt-reconciled, payment-stuck-in-doubt-reconciled,
    payout-stuck-in-doubt-reconciled.

    Authorize now, capture later (SPEC §6.1): capture-response-lost,
    cancel-request-lost, cancel-racing-capture, authorization-expired.

    Disputes (SPEC §6.2): dispute-won, dispute-lost-by-silence,
    dispute-webhook-lost-recovered-from-report.
    """
    from paycore.simulate.driver import ALL, Outcome, run_all

    names = list(scenarios) if scenarios else list(ALL)
    unknown = [name for name in names if name not in ALL]
    if unknown:
        raise typer.BadParameter(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(ALL)}")
    if transport not in ("inprocess", "http"):
        raise typer.BadParameter("--transport is inprocess or http")

    if not verbose:
        log_path = str(log_file) if log_file is not None else _new_log_file()
        logs.configure(*log_options_from_env(), path=log_path)
        console.print(f"log lines: {log_path}", markup=False, highlight=False, soft_wrap=True)

    def show(outcome: Outcome) -> None:
        verdict = "[green]PASS[/green]" if outcome.passed else "[red]FAIL[/red]"
        console.print(f"{verdict} {outcome.name} ({outcome.transport})")
        if not quiet or not outcome.passed:
            for line in outcome.timeline:
                console.print(line, markup=False, highlight=False)
        for problem in outcome.problems:
            console.print(f"  [red]broken:[/red] {problem}")

    try:
        passed = run_all(names, transport, seed=seed, ops=ops, show=show)
    finally:
        if not verbose:  # back to standard error, for whatever runs after (an embedding process)
            logs.configure(*log_options_from_env())
            console.print(f"log lines: {log_path}", markup=False, highlight=False, soft_wrap=True)
    if not passed:
        raise typer.Exit(1)


def _new_log_file() -> str:
    """A file of its own for this run's log lines, in the temp directory."""
    descriptor, path = tempfile.mkstemp(prefix="paycore-simulate-", suffix=".log")
    os.close(descriptor)
    return path
