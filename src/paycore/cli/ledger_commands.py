"""`paycore ledger ...`"""

from __future__ import annotations

import typer
from rich.console import Console

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.invariants import service as invariants
from paycore.ledger.verify import verify as verify_ledger

app = typer.Typer(help="The double-entry ledger.", no_args_is_help=True)
console = Console()


@app.command()
def verify() -> None:
    """Recompute every balance from the entries, and check every payment's, refund's, payout's
    and credit's transfers and paycore's own accounts against their states; exit 1 with a
    report on any difference."""
    database = Database(Settings.from_env())
    try:
        with console.status("verifying the ledger..."), database.read() as connection:
            report = verify_ledger(connection)
            report.problems.extend(invariants.verify_books(connection))
    finally:
        database.dispose()  # its pooled connection, else left to the garbage collector
    console.print(f"{report.accounts} accounts, {report.transfers} transfers, {report.entries} entries")
    if report.ok:
        console.print(
            "[green]ledger verified: every transfer balances, every currency sums to zero, "
            "every cached balance equals its entries, every flow's transfers match its state[/green]"
        )
        return
    for problem in report.problems:
        console.print(f"[red]- {problem}[/red]")
    console.print(f"[red]ledger verification FAILED: {len(report.problems)} problem(s)[/red]")
    raise typer.Exit(1)
