"""An invariant check, and the window its query runs over (`checks.py`, `books.py`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def window_of(alias: str, id_column: str = "id") -> str:
    """The window predicate on `alias`: subjects whose key `(tenant_id, id)` lies in
    `(:after_t, :after_i) < key <= (:upto_t, :upto_i)`."""
    key = f"({alias}.tenant_id, {alias}.{id_column})"
    return f"{key} > (:after_t, :after_i) AND {key} <= (:upto_t, :upto_i)"


@dataclass(frozen=True)
class Check:
    name: str  # stable snake_case: the metric's label, the violations' check_name
    subject_type: str  # account, transfer, payment, refund, payout, credit, currency: the audit event's object_type
    subjects: str | None  # the table the window runs over; None: not windowed
    sql: str
    describe: Callable[[Sequence[Any]], str]
    duplicate_movement: bool = False  # counts in paycore_duplicate_money_movements_total
    # The same query over every subject, no window (`paycore ledger verify`); None: not run there.
    all_sql: str | None = None
