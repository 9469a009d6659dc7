"""The API renderings of the audit log that money objects share: a payment's, a refund's and
a payout's `history` are the same list of state changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from paycore.kit.clock import to_rfc3339


class HistoryItem(Protocol):
    """What a history entry is made of: an event read back (`audit.service.Event`), or one a
    data-plane phase planned and wrote (`payments/settle_plan.py`: never read back)."""

    @property
    def kind(self) -> str: ...
    @property
    def from_state(self) -> str | None: ...
    @property
    def to_state(self) -> str | None: ...
    @property
    def cause(self) -> str: ...
    @property
    def actor(self) -> str: ...
    @property
    def created_at_us(self) -> int: ...


def history_json(events: Sequence[HistoryItem]) -> list[dict[str, Any]]:
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
