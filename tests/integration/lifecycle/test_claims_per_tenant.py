"""Every worker round takes due work tenant by tenant (`lifecycle.per_tenant`, ADR 0033): every
statement that locks rows names one tenant (`tenant_id = :t`, what Citus needs to lock rows of
a table distributed by tenant), a backlog of one tenant does not starve the others' items, and
two claims open at once on PostgreSQL take disjoint rows.

The queues are filled with rows written straight into their tables (only the columns a claim
reads are meaningful): the claims are the subject, not the flows that make the rows."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import BigInteger, Boolean, Connection, Integer, String, Table, insert, select

from paycore.db import observers
from paycore.db.engine import Database
from paycore.disputes import in_flight
from paycore.disputes.models import dispute_answers_in_flight
from paycore.inbound import repository as inbound
from paycore.inbound.models import processor_webhooks
from paycore.invariants import repository as invariants
from paycore.kit.clock import now_us
from paycore.lifecycle import per_tenant, store
from paycore.lifecycle.policy import Policy
from paycore.payments import states as payment_states
from paycore.payments.models import payments
from paycore.payouts import repository as payouts_repository
from paycore.payouts.models import payouts
from paycore.webhooks import repository as webhooks
from paycore.webhooks.models import webhook_deliveries, webhook_endpoints

TENANTS = ("acme", "bravo")
PAST_US = 1_000_000  # due a second before the test's now
BATCH = 10
POLICY = Policy(attempts_max=3, backoff_ms=1, backoff_max_ms=2, lease_ms=60_000, batch_max=BATCH)
# A locking statement's equality on the tenant: `payments.tenant_id = %(tenant_id_1)s`.
_TENANT_EQUAL = re.compile(r"\btenant_id = %\((\w+)\)s")


def _filled(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """`values`, with a plain value for every other required column of `table`."""
    row = dict(values)
    for column in table.columns:
        if column.name in row or column.nullable or column.server_default is not None:
            continue
        if isinstance(column.type, Boolean):
            row[column.name] = False
        elif isinstance(column.type, (Integer, BigInteger)):
            row[column.name] = 1
        elif isinstance(column.type, String) and column.type.length is not None and column.type.length <= 3:
            row[column.name] = "USD"
        elif column.name == "metadata":
            row[column.name] = "{}"
        else:  # the row's id (unique where a key needs it), cut to the column's length
            length = getattr(column.type, "length", None) or len(row["id"])
            row[column.name] = row["id"][-length:]
    return row


def _payment(tenant: str, number: int, due_us: int) -> dict[str, Any]:
    return {
        "tenant_id": tenant,
        "id": f"pay_{tenant}_{number:05}",
        "status": "in_doubt",
        "amount_minor": 1000,
        "refunded_minor": 0,
        "next_attempt_at_us": due_us,
        "claimed_until_us": None,
    }


def _add(connection: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    connection.execute(insert(table), [_filled(table, row) for row in rows])


def _fill_every_queue(database: Database, now: int) -> None:
    """Two due items of each tenant in every queue a worker round claims from."""

    def work(connection: Connection) -> None:
        for tenant in TENANTS:
            _add(connection, payments, [_payment(tenant, number, now - PAST_US) for number in range(2)])
            _add(
                connection,
                payouts,
                [
                    {"tenant_id": tenant, "id": f"po_{tenant}_{n}", "status": "scheduled", "execute_on": "2000-01-01"}
                    | {"amount_minor": 1000, "rail": "ach", "faulted_at_us": None, "account_number": "000123456789"}
                    for n in range(2)
                ],
            )
            _add(
                connection,
                processor_webhooks,
                [
                    {"tenant_id": tenant, "event_id": f"evt_{tenant}_{n}", "id": f"evt_{tenant}_{n}"}
                    | {"status": "unmatched", "next_attempt_at_us": now - PAST_US, "payload": "{}"}
                    for n in range(2)
                ],
            )
            _add(
                connection,
                dispute_answers_in_flight,
                [
                    {"tenant_id": tenant, "id": f"dp_{tenant}_{n}", "kind": "evidence", "attempts": 0}
                    | {"next_attempt_at_us": now - PAST_US, "claimed_by": None, "claimed_until_us": None}
                    for n in range(2)
                ],
            )
            for n in range(2):
                endpoint = f"we_{tenant}_{n}"
                _add(connection, webhook_endpoints, [{"tenant_id": tenant, "id": endpoint, "status": "enabled"}])
                _add(
                    connection,
                    webhook_deliveries,
                    [
                        {"tenant_id": tenant, "id": f"whd_{tenant}_{n}", "endpoint_id": endpoint}
                        | {"status": "pending", "next_attempt_at_us": now - PAST_US}
                    ],
                )

    database.transaction(work)


Claim = Callable[[Connection, int], list[Any]]

CLAIMS: dict[str, Claim] = {
    "lifecycle items (payments)": lambda c, now: store.claim_due(
        c,
        payments,
        statuses=payment_states.UNRESOLVED,
        now_us=now,
        worker_id="w",
        lease_until_us=now + 60_000_000,
        limit=BATCH,
    ),
    "payouts whose day has come": lambda c, now: payouts_repository.due(
        c, status="scheduled", execute_on_max="2999-01-01", now_us=now, limit=BATCH
    ),
    "unmatched processor events": lambda c, now: inbound.due_unmatched(c, now, BATCH),
    "kept dispute answers": lambda c, now: in_flight._claim(c, policy=POLICY, holder="w"),
    "webhook endpoints": lambda c, now: webhooks.claim_endpoints(
        c, now_us=now, worker_id="w", lease_until_us=now + 60_000_000, limit=BATCH
    ),
}


def _tenant_of(row: Any) -> str:
    return str(row["tenant_id"] if isinstance(row, dict) else row.tenant_id)


@contextmanager
def _statements(database: Database) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def record(statement: str, parameters: Any, _many: bool) -> None:
        seen.append((statement, parameters))

    with observers.observing(database.engine, record):
        yield seen


def test_every_claim_locks_only_rows_of_one_named_tenant(database: Database) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite takes no row locks: its one writer's transaction is exclusive")
    now = now_us()
    _fill_every_queue(database, now)
    for name, claim in CLAIMS.items():
        with _statements(database) as seen, database.engine.connect() as connection:
            claimed = claim(connection, now)
            connection.rollback()
        assert {_tenant_of(row) for row in claimed} == set(TENANTS), name  # both tenants served
        locking = [(sql, parameters) for sql, parameters in seen if "FOR UPDATE" in sql]
        assert len(locking) >= len(TENANTS), (name, seen)
        for sql, parameters in locking:
            named = {parameters[parameter] for parameter in _TENANT_EQUAL.findall(sql)}
            assert named and named <= set(TENANTS), (name, sql)
    with _statements(database) as seen, database.engine.connect() as connection:
        invariants.claim(connection, "any_check", now, 0)  # the checks' cursor: one row, tenant '*'
        connection.rollback()
    assert all(_TENANT_EQUAL.search(sql) for sql, _ in seen if "FOR UPDATE" in sql), seen


def test_a_backlog_of_one_tenant_does_not_starve_the_others(database: Database) -> None:
    """One tenant's 3 batches of items, due long before two other tenants' one item each: a
    round takes the others' items and fills the rest of its batch from the backlog."""
    now = now_us()

    def fill(connection: Connection) -> None:
        backlog = [_payment("backlog", number, now - 100 * PAST_US + number) for number in range(3 * BATCH)]
        _add(connection, payments, backlog + [_payment(tenant, 0, now - PAST_US) for tenant in TENANTS])

    database.transaction(fill)
    claimed = database.transaction(lambda c: CLAIMS["lifecycle items (payments)"](c, now))
    by_tenant: dict[str, list[str]] = {tenant: [] for tenant in ("backlog", *TENANTS)}
    for row in claimed:
        by_tenant[row["tenant_id"]].append(row["id"])
    assert by_tenant["acme"] == ["pay_acme_00000"] and by_tenant["bravo"] == ["pay_bravo_00000"], by_tenant
    assert by_tenant["backlog"] == [f"pay_backlog_{number:05}" for number in range(BATCH - 2)]  # oldest first
    assert all(row["claimed_by"] == "w" for row in claimed)
    again = database.transaction(lambda c: CLAIMS["lifecycle items (payments)"](c, now))
    assert [row["id"] for row in again] == [f"pay_backlog_{number:05}" for number in range(BATCH - 2, 2 * BATCH - 2)]


def test_tenants_are_found_oldest_due_first_and_bounded(database: Database) -> None:
    now = now_us()
    waited = {"carol": 30, "acme": 20, "bravo": 10}  # seconds each tenant's oldest item waited
    rows = [_payment(tenant, 0, now - seconds * PAST_US) for tenant, seconds in waited.items()]
    database.transaction(lambda c: _add(c, payments, rows))
    with database.read() as connection:
        due = select(payments).where(payments.c.status == "in_doubt", payments.c.next_attempt_at_us <= now)
        found = per_tenant.due_tenants(connection, payments, due, payments.c.next_attempt_at_us, tenants_max=2)
    assert found == ["carol", "acme"]


def test_two_claims_at_once_take_disjoint_rows(database: Database) -> None:
    """Two transactions open at once, each claiming a batch: on PostgreSQL the second skips the
    rows the first holds (per tenant), and together they take every due item once."""
    if not database.is_postgres:
        pytest.skip("SQLite has one writer: two claims cannot be open at once")
    now = now_us()
    rows = [_payment(tenant, number, now - PAST_US + number) for tenant in TENANTS for number in range(BATCH)]
    database.transaction(lambda c: _add(c, payments, rows))
    claim = CLAIMS["lifecycle items (payments)"]
    with database.engine.connect() as first, database.engine.connect() as second:
        mine = claim(first, now)  # still open: its rows stay locked
        theirs = claim(second, now)
        second.commit()
        first.commit()
    taken = [(row["tenant_id"], row["id"]) for row in mine + theirs]
    assert len(mine) == len(theirs) == BATCH
    assert sorted(taken) == sorted((row["tenant_id"], row["id"]) for row in rows)  # each once
