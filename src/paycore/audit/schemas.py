"""The API renderings of the audit log that money objects share: a payment's, a refund's and
a payout's `history` are the same list of state changes."""

from __future__ import annotations

from typing import Any

from paycore.audit.service import Event
from paycore.kit.clock import to_rfc3339


def history_json(events: list[Event]) -> list[dict[str, Any]]:
    return [
        {
            "from": event.from_state,
            "to": event.to_state,
            "cause": event.cause,
            "actor": event.actor,
            "at": to_rfc3339(event.created_at_us),
        }
        for event in events
        if event.kind == "state_change"
    ]
