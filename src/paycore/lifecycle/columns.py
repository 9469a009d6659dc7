"""The work columns every table the lifecycle drives carries, with one name each.

- `attempts`: rounds of work on the item so far (a round is one claim: one call, or a status
  query and the re-send it led to); every call of a round is recorded with its number;
- `next_attempt_at_us`: when a worker should take it next; NULL: nothing to do;
- `claimed_by`, `claimed_until_us`: the lease of the worker that holds it;
- `in_doubt_since_us`: when it became `in_doubt`;
- `fault_code`, `faulted_at_us`: the error of the last round that could not move the item (its
  code: a domain error's, or the exception's type) and when; NULL once a round or a move goes
  through (`lifecycle.faults`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import BigInteger, Column, Index, Integer, String, text

ATTEMPTS: Final = "attempts"
NEXT_ATTEMPT_AT_US: Final = "next_attempt_at_us"
CLAIMED_BY: Final = "claimed_by"
CLAIMED_UNTIL_US: Final = "claimed_until_us"
IN_DOUBT_SINCE_US: Final = "in_doubt_since_us"
FAULT_CODE: Final = "fault_code"
FAULTED_AT_US: Final = "faulted_at_us"

WORKER_ID_LENGTH = 64
FAULT_CODE_LENGTH = 64

# Set with every round that goes through and every move: the item is no longer stuck on a fault.
NO_FAULT: Final = {FAULT_CODE: None, FAULTED_AT_US: None}

# Set when an item needs no more work: nothing due, nobody holds it.
UNSCHEDULED: Final = {NEXT_ATTEMPT_AT_US: None, CLAIMED_BY: None, CLAIMED_UNTIL_US: None}


def fresh(*, next_attempt_at_us: int | None = None) -> dict[str, Any]:
    """The work columns of an item just created: no round yet, nobody holds it."""
    return {
        ATTEMPTS: 0,
        NEXT_ATTEMPT_AT_US: next_attempt_at_us,
        CLAIMED_BY: None,
        CLAIMED_UNTIL_US: None,
        IN_DOUBT_SINCE_US: None,
        **NO_FAULT,
    }


@dataclass(frozen=True, kw_only=True)
class WorkFields:
    """The work columns as fields, with the two times the lifecycle keeps: the base of every
    type it drives (`Payment`, `Refund`, `Payout` add their own fields)."""

    attempts: int
    next_attempt_at_us: int | None
    claimed_by: str | None
    claimed_until_us: int | None
    in_doubt_since_us: int | None
    created_at_us: int
    updated_at_us: int
    fault_code: str | None = None
    faulted_at_us: int | None = None


def work_columns() -> list[Column[object]]:
    """The columns, in the order the tables declare them."""
    return [
        Column(ATTEMPTS, Integer, nullable=False),
        Column(NEXT_ATTEMPT_AT_US, BigInteger, nullable=True),
        Column(CLAIMED_BY, String(WORKER_ID_LENGTH), nullable=True),
        Column(CLAIMED_UNTIL_US, BigInteger, nullable=True),
        Column(IN_DOUBT_SINCE_US, BigInteger, nullable=True),
        Column(FAULT_CODE, String(FAULT_CODE_LENGTH), nullable=True),
        Column(FAULTED_AT_US, BigInteger, nullable=True),
    ]


def due_index(table_name: str) -> Index:
    """The items a worker should take (`store.claim_due`: in these statuses, due by now, due
    first then by id), as the payouts' `ix_payouts_next_attempt` finds them: searched by status
    and due time, so that no planner estimate makes reading the table cheaper (without
    statistics a range alone looks like a third of the rows); partial, so it holds the work to
    do, never the finished history (migration 0025)."""
    where = text(f"{NEXT_ATTEMPT_AT_US} IS NOT NULL")
    columns = ("status", NEXT_ATTEMPT_AT_US, "id")
    return Index(f"ix_{table_name}_queue", *columns, sqlite_where=where, postgresql_where=where)


def tenant_due_index(table_name: str) -> Index:
    """A tenant's items a worker should take (`per_tenant.claim`: the tenant's, in these
    statuses, due by now, due first then by id): `due_index` led by the tenant, so that a claim
    that names its tenant (as Citus needs to lock rows) searches the tenant's work in flight,
    never its history (migration 0044)."""
    where = text(f"{NEXT_ATTEMPT_AT_US} IS NOT NULL")
    columns = ("tenant_id", "status", NEXT_ATTEMPT_AT_US, "id")
    return Index(f"ix_{table_name}_tenant_queue", *columns, sqlite_where=where, postgresql_where=where)


def faulted_index(table_name: str) -> Index:
    """The items a round could not move, oldest fault first (the console's queue): partial, so
    it holds only those rows and costs the other writes nothing."""
    where = text(f"{FAULTED_AT_US} IS NOT NULL")
    return Index(f"ix_{table_name}_faulted", FAULTED_AT_US, "id", sqlite_where=where, postgresql_where=where)
