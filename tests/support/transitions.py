"""Watching the lifecycle's one status change (`paycore.lifecycle.transition.change`): every
call it answers, in order, as (table, (from, to), rows changed). The real function runs: this
only watches which place went through it (issue 30: one function changes a status)."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.lifecycle import transition

Seen = tuple[str, tuple[str, str], int]


def watch(monkeypatch: pytest.MonkeyPatch) -> list[Seen]:
    seen: list[Seen] = []
    real = transition.change

    def watched(connection: Any, table: Any, key: Any, move: tuple[str, str], **kwargs: Any) -> int:
        changed = real(connection, table, key, move, **kwargs)
        seen.append((table.name, move, changed))
        return changed

    monkeypatch.setattr(transition, "change", watched)
    return seen
