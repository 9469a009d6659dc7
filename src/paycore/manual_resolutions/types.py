"""A manual resolution as the rest of paycore sees it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from sqlalchemy import Row

Kind = Literal["payment", "refund", "payout"]
KINDS: Final[tuple[Kind, ...]] = get_args(Kind)
Outcome = Literal["succeeded", "failed"]
OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)


@dataclass(frozen=True)
class Resolution:
    tenant_id: str
    id: str
    object_type: str  # a Kind
    object_id: str
    object_status: str  # the item's status when proposed (public name)
    outcome: str  # an Outcome
    evidence: str
    status: str
    proposed_by: str
    decided_by: str | None
    decision_note: str | None
    created_at_us: int
    updated_at_us: int
    decided_at_us: int | None


def resolution_from_row(row: Mapping[Any, Any] | Row[Any]) -> Resolution:
    mapping = row._mapping if isinstance(row, Row) else row
    return Resolution(**mapping)


def resolution_row(resolution: Resolution) -> dict[str, Any]:
    return dataclasses.asdict(resolution)
