"""The processor's webhook that settles a refund, on the data plane (ADR 0026 step 3, issue 39),
on both databases.

- What it costs in SQL, counted (never timed) around `receive.receive`: the refund's read and
  one call on PostgreSQL (no client commit); BEGIN IMMEDIATE, the read and the fixed list on
  SQLite (8 statements, a success's and a failure's: a failure releases the ceiling on the
  payment's row where a success writes the posted entries), one commit.
- That it writes what the reference path (`inbound.service.receive`) writes for the same event
  and refund, row for row (the refund, the payment's refunded amount, the hold's resolution and
  entries, the events with their sequence and snapshot, the stored event, the accounts'
  totals), `processing` and `in_doubt`, succeeded and failed, and answers the same (and a
  redelivery the same).
- That everything else is the reference path's: another amount (a mismatch), a `pending` word,
  an unknown refund, a refund settled already, and a schema without the function.

Before (the reference path, `service.receive` alone, counted the same way): `REFERENCE_COST`.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.db.migrate import MIGRATIONS_PATH
from paycore.inbound import apply_refund, receive, service
from paycore.inbound.service import Received
from paycore.invariants import service as invariants
from paycore.kit import signing
from paycore.kit.clock import now_us, to_rfc3339
from paycore.ledger import service as ledger
from tests.integration.inbound.test_receive_data_plane import references, signed
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_settle_data_plane import normal_value
from tests.integration.refunds import support
from tests.support.statements import counting

__all__ = ["references"]  # the fixture, shared with the payments' tests

AMOUNT_MINOR = 300
# The sandbox's fault that leaves a sent refund `processing` (its answer `pending`) or `in_doubt`.
FAULTS = {"processing": "settle_late", "in_doubt": "drop_response"}
# (statements, commits) of `receive.receive` for a webhook that settles a refund, by database.
APPLY_COST = {"sqlite": (10, 1), "postgresql": (2, 0)}
# ... and for one that confirms a refund already settled (the plain case): the read and one call;
# BEGIN IMMEDIATE, the read, the stored event and the audit event.
CONFIRM_COST = {"sqlite": (4, 1), "postgresql": (2, 0)}
REDELIVERY_COST = {"sqlite": 3, "postgresql": 2}  # the event found stored: the audit event not written
REFERENCE_COST = {  # the reference path's, `service.receive` alone, for the same events, by outcome
    ("sqlite", "succeeded"): (12, 1),
    ("sqlite", "failed"): (12, 1),
    ("postgresql", "succeeded"): (11, 1),
    ("postgresql", "failed"): (11, 1),
}


def waiting(env: Env, start: str) -> tuple[str, str]:
    """(merchant account, refund id): a refund of a paid payment, sent and left `start`."""
    merchant, payment_id = support.paid(env)
    refund = support.created(env, payment_id, AMOUNT_MINOR)
    env.faults({"fault": FAULTS[start], "next_n": 1, "ops": ["refund"]})
    assert support.send(env) == 1
    assert support.status_of(env, refund["id"]) == start
    return merchant, str(refund["id"])


def tenant_of(database: Database, refund_id: str) -> str:
    with database.read() as connection:
        return str(connection.execute(text("SELECT tenant_id FROM refunds WHERE id = :r"), {"r": refund_id}).scalar())


def event_for(env: Env, refund_id: str, outcome: str, **data: Any) -> bytes:
    """The processor's webhook settling the refund: `refund.succeeded`, or `refund.failed`."""
    fields: dict[str, Any] = {
        "object": "refund",
        "request_id": refund_id,
        "merchant_id": tenant_of(env.database, refund_id),
        "status": outcome,
        "amount_minor": AMOUNT_MINOR,
        "currency": "USD",
        "processor_refund_id": f"re_{refund_id}",
    }
    if outcome == "failed":
        fields["failure_code"] = "refund_declined"
    document = {
        "id": f"evt_{refund_id}_{now_us()}",
        "type": f"refund.{outcome if outcome != 'pending' else 'pending'}",
        "created_at": "2026-12-06T00:00:00Z",
        "sequence": 3,
        "data": {**fields, **data},
    }
    return json.dumps(document).encode()


def dialect(env: Env) -> str:
    return env.database.engine.dialect.name


_TOTALS = "debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count"


def totals_of(database: Database, merchant: str) -> dict[str, dict[str, int]]:
    with database.read() as connection:
        found = {}
        for role, where in (("destination", "id = :a"), ("clearing", "code = 'processor.clearing.USD'")):
            rows = connection.execute(text(f"SELECT {_TOTALS} FROM ledger_accounts WHERE {where}"), {"a": merchant})
            found[role] = dict(rows.mappings().one())
    return found


def rows_of(database: Database, refund_id: str) -> dict[str, Any]:
    """Every row the refund wrote or moved, in a fixed order."""
    with database.read() as connection:

        def read(sql: str, **params: Any) -> list[dict[str, Any]]:
            return [dict(row) for row in connection.execute(text(sql), params).mappings()]

        [refund] = read("SELECT * FROM refunds WHERE id = :r", r=refund_id)
        tenant = refund["tenant_id"]
        [payment] = read(
            "SELECT id, refunded_minor, updated_at_us FROM payments WHERE tenant_id = :t AND id = :p",
            t=tenant,
            p=refund["payment_id"],
        )
        owned = "t.tenant_id = :t AND t.owner_id = :r"
        transfers = read(
            f"SELECT * FROM ledger_transfers t WHERE {owned} ORDER BY kind = 'pending' DESC", t=tenant, r=refund_id
        )
        entries = read(
            "SELECT e.* FROM ledger_entries e JOIN ledger_transfers t ON t.tenant_id = e.tenant_id"
            f" AND t.id = e.transfer_id WHERE {owned} ORDER BY t.kind = 'pending' DESC, e.direction DESC",
            t=tenant,
            r=refund_id,
        )
        events = read(
            "SELECT * FROM events WHERE tenant_id = :t AND object_id = :r ORDER BY created_at_us, id",
            t=tenant,
            r=refund_id,
        )
        webhooks = read(
            "SELECT * FROM processor_webhooks WHERE tenant_id = :t AND request_id = :r", t=tenant, r=refund_id
        )
    return {
        "refund": refund,
        "payment": payment,
        "transfers": transfers,
        "entries": entries,
        "events": events,
        "webhooks": webhooks,
    }


def _names(value: Any, names: dict[Any, str], key: str = "") -> None:
    """Each id, reference and time the rows hold, named by the order it first appears in."""
    if isinstance(value, dict):
        for name, item in value.items():
            _names(item, names, name)
    elif isinstance(value, list):
        for item in value:
            _names(item, names, key)
    elif isinstance(value, str) and value[:1] in "{[":
        _names(json.loads(value), names, key)
    elif isinstance(value, str) and (key.endswith(("id", "_key", "reference")) or key == "fingerprint"):
        names.setdefault(value, f"ID{len(names)}")
    elif isinstance(value, int) and not isinstance(value, bool) and key.endswith("_us") and value > 10**15:
        names.setdefault(value, f"T{len(names)}")
        names.setdefault(to_rfc3339(value), names[value])


def normal(rows: dict[str, Any]) -> dict[str, Any]:
    """The rows with each id and time replaced by its name, JSON decoded, a call's latency left
    out, and each entry's number counted from the hold's on its account."""
    names: dict[Any, str] = {}
    _names(rows, names)
    found = {table: normal_value(value, names) for table, value in rows.items()}
    holds = {entry["account_id"]: entry["account_sequence"] for entry in found["entries"][:2]}
    for entry in found["entries"]:
        entry["account_sequence"] -= holds[entry["account_id"]]
    return found


class Settled:
    """A refund settled by its webhook: its rows, what the webhook added to its two accounts'
    totals and to its payment's refunded amount, and what each delivery answered."""

    def __init__(self, env: Env, start: str, outcome: str, deliver: Callable[..., Received]) -> None:
        merchant, refund_id = waiting(env, start)
        body = event_for(env, refund_id, outcome)
        before, refunded = (
            totals_of(env.database, merchant),
            rows_of(env.database, refund_id)["payment"]["refunded_minor"],
        )
        self.results = [deliver(env.database, *signed(env, body)).result for _ in range(2)]
        after = totals_of(env.database, merchant)
        self.totals = {role: {name: after[role][name] - before[role][name] for name in after[role]} for role in after}
        self.rows = normal(rows_of(env.database, refund_id))
        self.released = refunded - self.rows["payment"]["refunded_minor"]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_settling_webhook_is_a_read_and_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    env: Env, outcome: str, references: list[str]
) -> None:
    _, refund_id = waiting(env, "processing")
    body = event_for(env, refund_id, outcome)
    with counting(env.database) as statements:
        received = receive.receive(env.database, *signed(env, body))
    assert received == Received(json.loads(body)["id"], "applied") and references == []
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == APPLY_COST[dialect(env)], statements
    if dialect(env) == "postgresql":
        assert run[1].startswith("SELECT paycore_inbound_apply_refund("), run
    else:
        assert run[0] == "BEGIN IMMEDIATE" and run[2].startswith("INSERT INTO processor_webhooks"), run
    with counting(env.database) as statements:
        assert receive.receive(env.database, *signed(env, body)).result == "duplicate"
    run = [sql for sql in statements if sql != "COMMIT"]
    assert len(run) == REDELIVERY_COST[dialect(env)] and references == [], "a redelivery: its event stored"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_the_reference_path_costs_what_the_docstring_says(env: Env, outcome: str) -> None:
    _, refund_id = waiting(env, "processing")
    body = event_for(env, refund_id, outcome)
    with counting(env.database) as statements:
        assert service.receive(env.database, *signed(env, body)).result == "applied"
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == REFERENCE_COST[(dialect(env), outcome)], statements


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("start", ["processing", "in_doubt"])
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_the_data_plane_writes_what_the_reference_path_writes(
    env: Env, start: str, outcome: str, references: list[str]
) -> None:
    fast = Settled(env, start, outcome, receive.receive)
    assert references == [], "the data plane settled it and answered its redelivery"
    reference = Settled(env, start, outcome, service.receive)

    assert fast.results == reference.results == ["applied", "duplicate"]
    assert fast.rows == reference.rows
    assert fast.totals == reference.totals
    assert fast.released == reference.released == (AMOUNT_MINOR if outcome == "failed" else 0)
    assert fast.rows["refund"]["status"] == outcome
    assert [row["kind"] for row in fast.rows["transfers"]] == ["pending", "post" if outcome == "succeeded" else "void"]
    assert [(row["status"], row["attempts"]) for row in fast.rows["webhooks"]] == [("applied", 1)]
    posted = AMOUNT_MINOR if outcome == "succeeded" else 0
    assert fast.totals["destination"]["debits_posted_minor"] == posted
    assert fast.totals["destination"]["debits_pending_minor"] == -AMOUNT_MINOR
    assert fast.totals["clearing"]["credits_posted_minor"] == posted
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []


# ------------------------------------------------------------------ the plain case


def sent(env: Env, outcome: str) -> tuple[str, bytes]:
    """A refund the processor's answer settled (`outcome`), and the webhook that confirms it."""
    _, payment_id = support.paid(env, token="tok_ok" if outcome == "succeeded" else "tok_refund_declined")
    refund = support.created(env, payment_id, AMOUNT_MINOR)
    assert support.send(env) == 1 and support.status_of(env, refund["id"]) == outcome
    return str(refund["id"]), event_for(env, str(refund["id"]), outcome)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_confirming_webhook_is_the_read_and_one_call_and_writes_what_the_reference_path_writes(
    env: Env, outcome: str, references: list[str]
) -> None:
    fast_id, fast_body = sent(env, outcome)
    reference_id, reference_body = sent(env, outcome)
    with counting(env.database) as statements:
        first = receive.receive(env.database, *signed(env, fast_body))
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == CONFIRM_COST[dialect(env)], statements
    fast = [first.result, receive.receive(env.database, *signed(env, fast_body)).result]
    assert references == [], "the data plane answered both"
    reference = [service.receive(env.database, *signed(env, reference_body)).result for _ in range(2)]
    assert fast == reference == ["stale", "duplicate"]
    assert normal(rows_of(env.database, fast_id)) == normal(rows_of(env.database, reference_id))


# ------------------------------------------------------------------ everything else: the reference path

FALLBACKS: list[tuple[str, str, dict[str, Any], str]] = [
    ("another amount: a mismatch", "succeeded", {"amount_minor": AMOUNT_MINOR + 1}, "mismatch"),
    ("another currency: a mismatch", "failed", {"currency": "EUR"}, "mismatch"),
    ("a pending word", "pending", {}, "stale"),
    ("an unknown refund", "succeeded", {"request_id": "rf_unknown"}, "unmatched"),
]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize(("name", "outcome", "data", "expected"), FALLBACKS, ids=[case[0] for case in FALLBACKS])
def test_every_other_event_is_the_reference_paths(
    env: Env, name: str, outcome: str, data: dict[str, Any], expected: str, references: list[str]
) -> None:
    _, refund_id = waiting(env, "in_doubt")
    body = event_for(env, refund_id, outcome, **data)
    before = rows_of(env.database, refund_id)
    received = receive.receive(env.database, *signed(env, body))
    assert received.result in (expected, "no_change") and references == [received.result], name
    assert rows_of(env.database, refund_id)["refund"] == before["refund"], "nothing moved"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_plan_is_made_for_the_refund_as_read_only(env: Env, references: list[str]) -> None:
    """A refund settled already has no plan: a contradicting word is the reference path's."""
    _, refund_id = waiting(env, "processing")
    assert receive.receive(env.database, *signed(env, event_for(env, refund_id, "succeeded"))).result == "applied"
    contradiction = event_for(env, refund_id, "failed")
    with env.database.read() as connection:
        event = service.verified_event(*signed(env, contradiction))
        assert apply_refund.REFUND.plan_of(connection, event, contradiction) is None
    assert receive.receive(env.database, *signed(env, contradiction)).result == "conflict"
    assert references == ["conflict"]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_schema_without_the_function_settles_it_by_the_reference_path(env: Env, references: list[str]) -> None:
    """A PostgreSQL database one revision behind: the call fails with 42883 having written
    nothing, and the reference path applies the event as before. The functions are put back."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    [path] = (MIGRATIONS_PATH / "versions").glob("*_inbound_refunds.py")
    spec = importlib.util.spec_from_file_location("inbound_refunds_migration", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    _, refund_id = waiting(env, "in_doubt")
    body = event_for(env, refund_id, "succeeded")
    with env.database.autocommit() as connection:
        connection.execute(text(f"DROP FUNCTION {migration._APPLY}"))
    try:
        received = receive.receive(env.database, *signed(env, body))
    finally:
        with env.database.autocommit() as connection:
            connection.execute(text(migration._CREATE_APPLY))
    assert received.result == "applied" and references == ["applied"]
    assert support.status_of(env, refund_id) == "succeeded"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("start", ["processing", "in_doubt"])
def test_the_route_settles_it_on_the_data_plane(env: Env, start: str, references: list[str]) -> None:
    """`POST /v1/webhooks/processor` (its thin edge: on SQLite the write joins the group commit
    from the event loop, on PostgreSQL the whole receive runs on one worker thread)."""
    merchant, refund_id = waiting(env, start)
    body = event_for(env, refund_id, "succeeded")
    _, signature, _ = signed(env, body)
    headers = {signing.SIGNATURE_HEADER: signature, "Content-Type": "application/json"}
    response = env.client.post("/v1/webhooks/processor", content=body, headers=headers)
    assert response.status_code == 200 and response.json()["result"] == "applied", response.text
    assert references == [], "the data plane settled it"
    assert support.status_of(env, refund_id) == "succeeded"
    assert support.money(env, merchant)[0] == 1000 - AMOUNT_MINOR
