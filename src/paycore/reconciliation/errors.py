"""Reconciliation's errors: what a caller (the CLI, the HTTP API, the worker) tells apart.

The ones an API request can meet are domain errors with a stable code (docs/errors.md); the
HTTP layer alone maps their family to a status."""

from __future__ import annotations

from paycore.kit.errors import Conflict, InvalidRequest, NotFound
from paycore.reconciliation.report import NotAReport

__all__ = ["BreakNotFound", "BreakNotOpen", "DayBusy", "NotAReport", "RunNotFound", "UnknownResolution"]


class DayBusy(Exception):
    """Another run (a worker or a CLI run, in any process) holds this day: nothing was done."""

    def __init__(self, day: str, holder: str) -> None:
        super().__init__(f"day {day} is being reconciled by {holder}; try again when it ends")
        self.day = day
        self.holder = holder


class BreakNotFound(NotFound):
    """No break with this id in this tenant."""

    code = "break_not_found"


class RunNotFound(NotFound):
    """No reconciliation run with this id."""

    code = "run_not_found"


class BreakNotOpen(Conflict):
    """The break is no longer open (resolved or superseded): it cannot be resolved again
    (details: status, the break's status now)."""

    code = "break_not_open"

    def __init__(self, status: str) -> None:
        super().__init__(f"the break is {status}: only an open break can be resolved", status=status)
        self.status = status


class UnknownResolution(InvalidRequest):
    """A resolution outside the documented set (`states.RESOLUTIONS`)."""
