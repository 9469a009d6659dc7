"""Reconciliation's errors: what a caller (the CLI, the HTTP API, the worker) tells apart."""

from __future__ import annotations

from paycore.reconciliation.report import NotAReport

__all__ = ["BreakNotFound", "BreakNotOpen", "DayBusy", "NotAReport", "UnknownResolution"]


class DayBusy(Exception):
    """Another run (a worker or a CLI run, in any process) holds this day: nothing was done."""

    def __init__(self, day: str, holder: str) -> None:
        super().__init__(f"day {day} is being reconciled by {holder}; try again when it ends")
        self.day = day
        self.holder = holder


class BreakNotFound(Exception):
    """No break with this id in this tenant."""


class BreakNotOpen(Exception):
    """The break is no longer open (resolved or superseded): it cannot be resolved again."""

    def __init__(self, status: str) -> None:
        super().__init__(f"the break is {status}")
        self.status = status


class UnknownResolution(ValueError):
    """A resolution outside the documented set."""
