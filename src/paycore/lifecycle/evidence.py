"""Evidence and what a domain decides it proves.

Evidence is anything another system said about an item: the answer to a call, a status
query, a webhook, a line of a settlement report. `unreachable` and `not_found` prove nothing
about the money: at most they make an item that was being sent `in_doubt`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

R = TypeVar("R")
T = TypeVar("T")
EvidenceKind = Literal["result", "refused", "unreachable", "not_found"]
Reason = Literal["applied", "no_change", "stale", "mismatch", "lost_race", "late"]  # late: a return after its window


@dataclass(frozen=True)
class Evidence(Generic[R]):
    kind: EvidenceKind
    result: R | None = None
    refusal_code: str | None = None
    operation: str | None = None  # the call that brought it (e.g. `get_payout`), if a call did

    @classmethod
    def of_result(cls, result: R, *, operation: str | None = None) -> Evidence[R]:
        return cls("result", result=result, operation=operation)


@dataclass(frozen=True)
class Decision:
    """The states evidence moves an item through, in order (empty: it stays), the columns set
    with each move (a failure code, the other system's reference) and the audit data."""

    path: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] | None = None


STAY = Decision()


@dataclass(frozen=True)
class Applied(Generic[T]):
    """The item as it is now, whether evidence changed it, and why (not)."""

    item: T
    changed: bool
    reason: Reason
