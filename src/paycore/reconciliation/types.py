"""A break and a run as the rest of paycore (the API, the ops pages) sees them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Break:
    """One finding of a report, in the tenant its line names (ADR 0014). `line` is the report
    line as read, a JSON array of its fields; `object_*` are None when it names nothing paycore
    holds. `resolution`, `note`, `resolved_by` and `resolved_at_us` are set when resolved."""

    tenant_id: str
    id: str
    run_id: str
    day: str
    type: str
    status: str
    object_type: str | None
    object_id: str | None
    object_status: str | None
    line_number: int | None
    line: str
    detail: str
    resolution: str | None
    note: str | None
    resolved_by: str | None
    resolved_at_us: int | None
    created_at_us: int


@dataclass(frozen=True)
class Run:
    """A run as a tenant sees it: the run is global (one report covers every merchant), so its
    volumes (lines read, matched, resolved, breaks over all tenants) are left out, and `breaks`
    counts only this tenant's breaks the run stored, by type."""

    id: str
    day: str
    source: str
    status: str
    report_sha256: str | None
    created_at_us: int
    finished_at_us: int | None
    breaks: Mapping[str, int]


@dataclass(frozen=True)
class Abandoned:
    """A run that stopped before completing (its lease lapsed, or it stopped on an error),
    marked `abandoned`, with how many of its open breaks were rolled back (superseded)."""

    run_id: str
    day: str
    rolled_back: int


_BREAK_FIELDS = tuple(field.name for field in dataclasses.fields(Break))
_RUN_FIELDS = tuple(field.name for field in dataclasses.fields(Run) if field.name != "breaks")


def break_from_row(row: Mapping[Any, Any]) -> Break:
    """By name, so that a column added to the table later does not break the reading."""
    return Break(**{name: row[name] for name in _BREAK_FIELDS})


def run_from_row(row: Mapping[Any, Any], breaks: Mapping[str, int]) -> Run:
    return Run(**{name: row[name] for name in _RUN_FIELDS}, breaks=dict(breaks))
