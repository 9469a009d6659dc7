"""All of the invariant checks' SQL: the cursors, the windows, the checks, the findings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, select, text, update

from paycore.db.sql import insert_or_ignore
from paycore.invariants.models import ALL_TENANTS, invariant_cursors, invariant_violations
from paycore.invariants.types import Check

START = ("", "")  # before every key: tenant ids are 1..64 characters

_WINDOWED_TABLES = frozenset(
    {"ledger_transfers", "ledger_accounts", "payments", "payouts", "refunds", "credits", "disputes"}
)


def ensure_cursor(connection: Connection, check_name: str, now_us: int) -> None:
    values = {
        "tenant_id": ALL_TENANTS,
        "check_name": check_name,
        "after_tenant_id": START[0],
        "after_id": START[1],
        "last_run_at_us": 0,
        "run_by": None,
        "updated_at_us": now_us,
    }
    insert_or_ignore(connection, invariant_cursors, values, ("tenant_id", "check_name"))


def last_runs(connection: Connection) -> dict[str, int]:
    """Each check's last run time, for the checks that have a cursor row."""
    query = select(invariant_cursors.c.check_name, invariant_cursors.c.last_run_at_us).where(
        invariant_cursors.c.tenant_id == ALL_TENANTS
    )
    return {name: int(last) for name, last in connection.execute(query)}


def claim(connection: Connection, check_name: str, now_us: int, interval_us: int) -> tuple[str, str] | None:
    """The check's cursor when the check is due, its row locked for this transaction (another
    worker skips it: FOR UPDATE SKIP LOCKED on PostgreSQL; SQLite has one writer); else None."""
    query = (
        select(invariant_cursors.c.after_tenant_id, invariant_cursors.c.after_id)
        .where(
            invariant_cursors.c.tenant_id == ALL_TENANTS,
            invariant_cursors.c.check_name == check_name,
            invariant_cursors.c.last_run_at_us <= now_us - interval_us,
        )
        .with_for_update(skip_locked=True)
    )
    row = connection.execute(query).first()
    return None if row is None else (row[0], row[1])


def advance(connection: Connection, check_name: str, after: tuple[str, str], worker_id: str, now_us: int) -> None:
    connection.execute(
        update(invariant_cursors)
        .where(invariant_cursors.c.tenant_id == ALL_TENANTS, invariant_cursors.c.check_name == check_name)
        .values(
            after_tenant_id=after[0],
            after_id=after[1],
            last_run_at_us=now_us,
            run_by=worker_id,
            updated_at_us=now_us,
        )
    )


def mark_run(connection: Connection, check_name: str, worker_id: str, now_us: int) -> None:
    """Record a run that failed: the check is due again an interval later, from the same cursor."""
    connection.execute(
        update(invariant_cursors)
        .where(invariant_cursors.c.tenant_id == ALL_TENANTS, invariant_cursors.c.check_name == check_name)
        .values(last_run_at_us=now_us, run_by=worker_id, updated_at_us=now_us)
    )


def window(connection: Connection, table: str, after: tuple[str, str], rows_max: int) -> list[tuple[str, str]]:
    """The next `rows_max` subject keys after `after`, in primary-key order."""
    assert table in _WINDOWED_TABLES, table  # the name is ours, never input
    statement = text(
        f"SELECT tenant_id, id FROM {table} WHERE (tenant_id, id) > (:after_t, :after_i)"
        " ORDER BY tenant_id, id LIMIT :limit"
    )
    rows = connection.execute(statement, {"after_t": after[0], "after_i": after[1], "limit": rows_max})
    return [(row[0], row[1]) for row in rows]


def problems(
    connection: Connection, check: Check, after: tuple[str, str], upto: tuple[str, str]
) -> list[Sequence[Any]]:
    params = {"after_t": after[0], "after_i": after[1], "upto_t": upto[0], "upto_i": upto[1]}
    return [tuple(row) for row in connection.execute(text(check.sql), params)]


def every_problem(connection: Connection, check: Check, limit: int) -> list[Sequence[Any]]:
    """The check's problems over every subject (its `all_sql`), at most `limit`."""
    assert check.all_sql is not None, check.name
    statement = text(f"SELECT * FROM ({check.all_sql}) problems LIMIT :limit")
    return [tuple(row) for row in connection.execute(statement, {"limit": limit})]


def add_violation(
    connection: Connection, tenant_id: str, check_name: str, subject_id: str, detail: str, now_us: int
) -> bool:
    """Record a finding; False when this (tenant, check, subject) was found before."""
    values = {
        "tenant_id": tenant_id,
        "check_name": check_name,
        "subject_id": subject_id,
        "detail": detail,
        "created_at_us": now_us,
    }
    return insert_or_ignore(connection, invariant_violations, values, ("tenant_id", "check_name", "subject_id"))


def count_by_check(connection: Connection) -> dict[str, int]:
    query = select(invariant_violations.c.check_name, func.count()).group_by(invariant_violations.c.check_name)
    return {name: int(count) for name, count in connection.execute(query)}


def recent_violations(connection: Connection, tenant_id: str | None, limit: int) -> list[Any]:
    """The latest findings, newest first, of one tenant or of all (None)."""
    query = select(invariant_violations).order_by(invariant_violations.c.created_at_us.desc()).limit(limit)
    if tenant_id is not None:
        query = query.where(invariant_violations.c.tenant_id == tenant_id)
    return list(connection.execute(query))
