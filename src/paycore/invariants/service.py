"""Run the money invariant checks on a bounded budget, and record what they find once.

A run goes through every check (`checks.CHECKS`) that is due, each in its own transaction:
claim the check's cursor row (skipped when another worker holds it or it is not due), read
the next window of at most `rows_max` subjects after the cursor, run the check's query on
that window, record each problem in `invariant_violations` (once per tenant, check and
subject) with an audit event, and move the cursor past the window and record the run's time
(the check is due again `interval_ms` later). A window shorter than `rows_max` reached the end: the cursor starts
again from the beginning, so successive runs cover every subject. Only the database
coordinates workers: the cursor row's lock and its `last_run_at_us`, and the violations'
primary key. New findings are logged (ERROR, event `invariant_violation`) after the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.availability import DatabaseUnavailable
from paycore.db.engine import Database
from paycore.invariants import repository
from paycore.invariants.checks import CHECKS, DUPLICATE_MOVEMENTS, NAMES
from paycore.invariants.repository import START
from paycore.invariants.types import Check
from paycore.kit import actors
from paycore.kit.clock import now_us as clock_now_us

log = logging.getLogger(__name__)
_ACTOR = actors.worker("check_invariants")  # the one job that runs the checks


@dataclass(frozen=True)
class Budget:
    rows_max: int  # subjects per check per run (PAYCORE_INVARIANTS_ROWS_MAX)
    interval_ms: int  # a check runs at most this often (PAYCORE_INVARIANTS_INTERVAL_MS)


@dataclass(frozen=True)
class Finding:
    check: str
    tenant_id: str
    subject_type: str
    subject_id: str
    detail: str


@dataclass
class RunResult:
    checks_run: int = 0
    subjects_checked: int = 0
    found: list[Finding] = field(default_factory=list)


def run_due(database: Database, budget: Budget, worker_id: str) -> RunResult:
    result = RunResult()
    # A read first: most calls (every worker round) find nothing due and write nothing, so
    # they never take SQLite's write lock from the API.
    with database.read() as connection:
        last_runs = repository.last_runs(connection)
    due_before = clock_now_us() - budget.interval_ms * 1000
    due = {name for name in NAMES if last_runs.get(name, 0) <= due_before}
    if not due:
        return result
    if not last_runs.keys() >= set(NAMES):
        # Every cursor row exists before any run locks one, in a short transaction of its own:
        # a worker's first run never waits on another's insert held for a whole check.
        database.transaction(_ensure_cursors)
    for check in (check for check in CHECKS if check.name in due):
        try:
            checked, found = database.transaction(partial(_run, check=check, budget=budget, worker_id=worker_id))
        except DatabaseUnavailable:
            raise  # not this check's failure: the worker backs off until the database is back
        except Exception:  # e.g. a statement timeout on a huge window: the other checks still run
            log.exception(
                "invariant check %s failed; it runs again from the same cursor an interval later",
                check.name,
                extra={"event": "invariant_check_failed", "check": check.name},
            )
            database.transaction(partial(_mark_run, check_name=check.name, worker_id=worker_id))
            continue
        if checked is None:
            continue
        result.checks_run += 1
        result.subjects_checked += checked
        result.found.extend(found)
    for finding in result.found:
        log.error(
            "invariant violated: %s on %s %s",
            finding.check,
            finding.subject_type,
            finding.subject_id,
            extra={
                "event": "invariant_violation",
                "check": finding.check,
                "tenant_id": finding.tenant_id,
                "subject_type": finding.subject_type,
                "subject_id": finding.subject_id,
                "detail": finding.detail,
            },
        )
    return result


def _run(connection: Connection, check: Check, budget: Budget, worker_id: str) -> tuple[int | None, list[Finding]]:
    """One check's window; (None, []) when the check is not this worker's to run now."""
    now = clock_now_us()
    after = repository.claim(connection, check.name, now, budget.interval_ms * 1000)
    if after is None:
        return None, []
    if check.subjects is None:  # not windowed: the whole check, every run
        rows, checked, next_after = repository.problems(connection, check, START, START), 0, START
    else:
        keys = repository.window(connection, check.subjects, after, budget.rows_max)
        if not keys and after != START:  # past the end: start again from the beginning
            after = START
            keys = repository.window(connection, check.subjects, after, budget.rows_max)
        rows = repository.problems(connection, check, after, keys[-1]) if keys else []
        checked = len(keys)
        next_after = keys[-1] if len(keys) == budget.rows_max else START
    found = [_record(connection, check, row, worker_id, now) for row in rows]
    repository.advance(connection, check.name, next_after, worker_id, now)
    return checked, [finding for finding in found if finding is not None]


def _mark_run(connection: Connection, check_name: str, worker_id: str) -> None:
    repository.mark_run(connection, check_name, worker_id, clock_now_us())


def _ensure_cursors(connection: Connection) -> None:
    now = clock_now_us()
    for name in NAMES:
        repository.ensure_cursor(connection, name, now)


def _record(connection: Connection, check: Check, row: Sequence[Any], worker_id: str, now: int) -> Finding | None:
    tenant_id, subject_id = str(row[0]), str(row[1])
    detail = check.describe(row)
    if not repository.add_violation(connection, tenant_id, check.name, subject_id, detail, now):
        return None  # found before: recorded, logged and audited then
    audit.record_other(
        connection,
        tenant_id,
        kind="note",
        type="invariant.violation",
        object_type=check.subject_type,
        object_id=subject_id,
        cause=check.name,
        actor=_ACTOR,
        now_us=now,
        data={"check": check.name, "detail": detail},
    )
    return Finding(check.name, tenant_id, check.subject_type, subject_id, detail)


@dataclass(frozen=True)
class Violation:
    """A finding as recorded: what was found broken, on which subject, when."""

    tenant_id: str
    check: str
    subject_type: str
    subject_id: str
    detail: str
    found_at_us: int


def recent_violations(connection: Connection, *, tenant_id: str | None, limit: int) -> list[Violation]:
    """The latest findings, newest first (the console's list), of one tenant or of all."""
    subject_types = {check.name: check.subject_type for check in CHECKS}
    return [
        Violation(
            row.tenant_id,
            row.check_name,
            subject_types.get(row.check_name, "object"),
            row.subject_id,
            row.detail,
            row.created_at_us,
        )
        for row in repository.recent_violations(connection, tenant_id, limit)
    ]


def last_runs(connection: Connection) -> dict[str, int]:
    """When each check last ran (epoch microseconds), for the checks that ever ran."""
    return repository.last_runs(connection)


def violations_by_check(connection: Connection) -> dict[str, int]:
    """Every check's count of recorded violations (0 when none), for /metrics."""
    counted = repository.count_by_check(connection)
    return {name: counted.get(name, 0) for name in NAMES}


def duplicate_movements(counts: dict[str, int]) -> int:
    return sum(counts[name] for name in DUPLICATE_MOVEMENTS)


def verify_books(connection: Connection) -> list[str]:
    """The checks that have a query over every subject (the books against the flows' states),
    run whole, for `paycore ledger verify`: each problem as a line naming its check and subject,
    at most `VERIFY_PROBLEMS_MAX` per check."""
    found = []
    for check in CHECKS:
        if check.all_sql is None:
            continue
        for row in repository.every_problem(connection, check, VERIFY_PROBLEMS_MAX):
            found.append(f"{check.name}: {check.subject_type} {row[0]}/{row[1]}: {check.describe(row)}")
    return found


VERIFY_PROBLEMS_MAX = 100  # per check: a broken database is reported by example, as `ledger verify` does
