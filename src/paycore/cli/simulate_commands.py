"""`paycore simulate`: the refund flow across the two services, scenario by scenario (SPEC §8),
payments, refunds and payouts left in doubt that the day's settlement report resolves, and
authorizations captured, canceled and expired (SPEC §6.1), and disputes won and lost by
silence (SPEC §6.2). The help lists every scenario
(tests/integration/simulate/test_simulate.py checks it against the driver's)."""

from __future__ import annotations

import typer
from rich.console import Console

console = Console()


def simulate(
    scenarios: list[str] = typer.Argument(None, help="Scenarios to run (default: all). `chaos` takes --seed/--ops."),
    transport: str = typer.Option("inprocess", help="inprocess, or http (the sandbox as its own process)."),
    seed: int = typer.Option(1, help="Seed of the chaos scenario."),
    ops: int = typer.Option(200, help="Operations of the chaos scenario.", min=1, max=100_000),
    quiet: bool = typer.Option(False, "--quiet", help="Print only the verdicts, not the timelines."),
) -> None:
    """Run the scenarios end to end, print each timeline, check the invariants; exit 1 if any fails.

    Refunds (SPEC §8): success, over-refund-rejected, unknown-payment-rejected,
    declined, request-lost, response-lost, timeout-then-retry,
    duplicate-request, concurrent-refunds, callback-confirmation,
    approval-required, chaos.

    Left in doubt, resolved by the settlement report:
    stuck-in-doubt-reconciled, payment-stuck-in-doubt-reconciled,
    payout-stuck-in-doubt-reconciled.

    Authorize now, capture later (SPEC §6.1): capture-response-lost,
    cancel-request-lost, cancel-racing-capture, authorization-expired.

    Disputes (SPEC §6.2): dispute-won, dispute-lost-by-silence.
    """
    from paycore.simulate.driver import ALL, Outcome, run_all

    names = list(scenarios) if scenarios else list(ALL)
    unknown = [name for name in names if name not in ALL]
    if unknown:
        raise typer.BadParameter(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(ALL)}")
    if transport not in ("inprocess", "http"):
        raise typer.BadParameter("--transport is inprocess or http")

    def show(outcome: Outcome) -> None:
        verdict = "[green]PASS[/green]" if outcome.passed else "[red]FAIL[/red]"
        console.print(f"{verdict} {outcome.name} ({outcome.transport})")
        if not quiet or not outcome.passed:
            for line in outcome.timeline:
                console.print(line, markup=False, highlight=False)
        for problem in outcome.problems:
            console.print(f"  [red]broken:[/red] {problem}")

    if not run_all(names, transport, seed=seed, ops=ops, show=show):
        raise typer.Exit(1)
