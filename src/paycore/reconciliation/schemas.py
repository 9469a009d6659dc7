"""The reconciliation API shapes: the strict request to resolve a break, and the JSON of a break
and of a run as a tenant sees it (docs/reconciliation.md, "HTTP API")."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from paycore.kit.clock import to_rfc3339
from paycore.reconciliation.rendering import break_json
from paycore.reconciliation.states import NOTE_CHARS_MAX, Resolution
from paycore.reconciliation.types import Run
from paycore.schemas import StrictModel

__all__ = ["BreakResolve", "break_json", "run_json"]


class BreakResolve(StrictModel):
    resolution: Resolution
    note: str | None = Field(default=None, min_length=1, max_length=NOTE_CHARS_MAX)


def run_json(run: Run) -> dict[str, Any]:
    """A run as a tenant sees it: `breaks` counts the tenant's own breaks this run stored, by
    type; the run's volumes over every tenant are not shown."""
    return {
        "id": run.id,
        "object": "reconciliation_run",
        "day": run.day,
        "source": run.source,
        "status": run.status,
        "report_sha256": run.report_sha256,
        "breaks": dict(sorted(run.breaks.items())),
        "created_at": to_rfc3339(run.created_at_us),
        "finished_at": None if run.finished_at_us is None else to_rfc3339(run.finished_at_us),
    }
