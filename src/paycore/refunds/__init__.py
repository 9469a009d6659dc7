"""Refunds (SPEC §7). `handle` is the replay entry point of §7.2, a contract that names it
here; its controller is `paycore.refunds.replay`, loaded on the first call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def handle(charges: Sequence[Any], requests: Sequence[Any]) -> list[dict[str, Any]]:
    """SPEC §7.2: replay `requests` against `charges` in a database of their own."""
    from paycore.refunds.replay import handle as replay  # imported on use: importing refunds stays light

    return replay(charges, requests)


__all__ = ["handle"]
