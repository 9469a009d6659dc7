"""Refunds (SPEC §7). `handle` is the replay entry point of §7.2, a contract that names it
here; its controller lives with the other entry points (`paycore.replay.refunds`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def handle(charges: Sequence[Any], requests: Sequence[Any]) -> list[dict[str, Any]]:
    """SPEC §7.2: replay `requests` against `charges` in a database of their own."""
    from paycore.replay.refunds import handle as replay  # the controller imports this domain: no cycle

    return replay(charges, requests)


__all__ = ["handle"]
