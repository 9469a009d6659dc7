"""Evidence and what a domain decides it proves.

Evidence is anything another system said about an item: the answer to a call, a status
query, a webhook, a line of a settlement report. `unreachable` and `not_found` prove nothing
about the money: at most they make an item that was being sent `in_doubt`.

`manual` is a person's word, confirmed by a second person (manual resolution, ADR 0016): an
outcome (`succeeded` or `failed`) for an item no evidence from the other system will settle.
It moves the item through the same transitions and ledger effects as the other system's
answer would, with the cause `MANUAL_CAUSE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

R = TypeVar("R")
T = TypeVar("T")
EvidenceKind = Literal["result", "refused", "unreachable", "not_found", "manual"]
MANUAL_CAUSE: Final = "manual_resolution"  # the cause of a change a manual resolution makes
MANUAL_FAILURE_CODE: Final = "manual_resolution"  # the failure code of an item failed by hand
ManualOutcome = Literal["succeeded", "failed"]
Reason = Literal["applied", "no_change", "stale", "mismatch", "lost_race", "late"]  # late: a return after its window


@dataclass(frozen=True)
class Evidence(Generic[R]):
    kind: EvidenceKind
    result: R | None = None
    refusal_code: str | None = None
    operation: str | None = None  # the call that brought it (e.g. `get_payout`), if a call did
    outcome: ManualOutcome | None = None  # a manual resolution's outcome

    @classmethod
    def of_result(cls, result: R, *, operation: str | None = None) -> Evidence[R]:
        return cls("result", result=result, operation=operation)

    @classmethod
    def manual(cls, outcome: ManualOutcome) -> Evidence[Any]:
        return cls("manual", outcome=outcome)


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
