"""The columns of an event's row as a data-plane phase (ADR 0026) inserts it on SQLite, in the
order its parameters go (`audit.rows.event_row` builds the row; a row leaves out what it has
not, e.g. an unpublished event's `object_sequence` and `snapshot`, and is sent with `row.get`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EVENT_COLUMNS = (
    "tenant_id",
    "id",
    "kind",
    "type",
    "object_type",
    "object_id",
    "from_state",
    "to_state",
    "cause",
    "actor",
    "data",
    "object_sequence",
    "snapshot",
    "created_at_us",
)


def state_event_args(state_event: Mapping[str, Any]) -> tuple[Any, ...]:
    """A state event's arguments as the data plane's server functions take them, in this order."""
    return tuple(state_event[name] for name in ("id", "type", "cause", "actor", "data", "snapshot"))
