"""The report of bench/run (bench/targets.py): one row per figure, with its peer, ratio, target
and verdict, and every problem met on the way; one benchmark's failure is a row, not the end."""

from __future__ import annotations

import sys
from collections.abc import Callable

import _common as common
import _peers as peers


class Table:
    """The rows of the report and every problem met on the way."""

    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.rows: list[list[str]] = []
        self.problems: list[str] = []
        self.notes: list[str] = []

    def add(
        self, figure: str, ours: float | None, peer: float | None, target: str, met: bool | None, digits: int = 0
    ) -> None:
        ratio = common.ratio(ours, peer)
        verdict = "-" if met is None else ("smoke" if self.smoke else ("met" if met else "NOT met"))
        row = [figure, common.fmt(ours, digits), common.fmt(peer, digits), common.fmt_ratio(ratio), target, verdict]
        self.rows.append(row)

    def skip(self, figure: str, reason: str) -> None:
        self.rows.append([figure, "-", "-", "-", "-", f"skipped: {reason}"])


def section(name: str, table: Table, body: Callable[[], None]) -> None:
    """One benchmark; a missing peer or a failure is reported in the table, the others still run."""
    print(f"== {name}", file=sys.stderr, flush=True)
    try:
        body()
    except peers.PeerMissing as missing:
        table.skip(name, str(missing))
        print(f"   skipped: {missing}", file=sys.stderr, flush=True)
    except Exception as error:
        table.problems.append(f"{name}: {type(error).__name__}: {str(error)[:600]}")
        table.skip(name, f"failed ({type(error).__name__}), see below")
