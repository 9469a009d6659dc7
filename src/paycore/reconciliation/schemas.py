"""The reconciliation API shapes: the strict request to resolve a break, and the JSON of a break
and of a run as a tenant sees it (docs/reconciliation.md, "HTTP API")."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from paycore.kit.clock import to_rfc3339
from paycore.reconciliation.states import NOTE_CHARS_MAX, Resolution
from paycore.reconciliation.types import Break, Run
from paycore.schemas import StrictModel


class BreakResolve(StrictModel):
    resolution: Resolution
    note: str | None = Field(default=None, min_length=1, max_length=NOTE_CHARS_MAX)


def break_json(break_: Break) -> dict[str, Any]:
    """`line` is the report line as read, the list of its fields; `object_status` is the
    object's status when the break was found."""
    return {
        "id": break_.id,
        "object": "reconciliation_break",
        "type": break_.type,
        "status": break_.status,
        "day": break_.day,
        "run_id": break_.run_id,
        "object_type": break_.object_type,
        "object_id": break_.object_id,
        "object_status": break_.object_status,
        "line_number": break_.line_number,
        "line": json.loads(break_.line),
        "detail": break_.detail,
        "resolution": break_.resolution,
        "note": break_.note,
        "resolved_by": break_.resolved_by,
        "resolved_at": None if break_.resolved_at_us is None else to_rfc3339(break_.resolved_at_us),
        "created_at": to_rfc3339(break_.created_at_us),
    }


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
