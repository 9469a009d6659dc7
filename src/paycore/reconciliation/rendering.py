"""The JSON of a break as a tenant sees it: the API's answer and the snapshot its published
events carry (a module of its own so that `states`, which publishes them, can use it)."""

from __future__ import annotations

import json
from typing import Any

from paycore.kit.clock import to_rfc3339
from paycore.reconciliation.types import Break


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
