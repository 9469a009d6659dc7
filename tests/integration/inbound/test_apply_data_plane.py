"""The processor's webhook that moves a payment, on the data plane (ADR 0026 step 3, issue 39),
on both databases.

- What it costs in SQL, counted (never timed) around `receive.receive`, as
  test_receive_data_plane.py counts the plain case: the plain case's attempt (which writes
  nothing: the payment is not yet in the status the event proves), then the apply phase: one
  call on PostgreSQL (no client commit; the function reads the payment itself: the read before
  it, a statement of its own until migration 0046, is gone); BEGIN IMMEDIATE, the read and the
  fixed list on SQLite (8 statements, 7 for a decline, which posts no entries), one commit.
- That it writes what the reference path (`inbound.service.receive`) writes for the same event
  and payment, row for row (the payment, the hold's resolution and entries, the events with
  their sequence and snapshot, the stored event, the key's answer untouched, the accounts'
  totals), `processing` and `in_doubt`, succeeded and declined, and answers the same (and a
  redelivery the same).
- That everything else is the reference path's, which writes and answers as it always has: a
  webhook that overtook its own request's answer (the answer is the reference path's to write),
  another amount (a mismatch), an authorization's event, and a schema without the function.

Before (the reference path, `service.receive` alone, counted the same way; the ledger's account
facts cached): on SQLite BEGIN IMMEDIATE and 13 statements for a success (the event stored, the
payment read, the compare-and-set, the hold read back, its resolution, two totals, the entries,
the state event, the payment's events read back for the answer, the key's answer where none is
recorded, the audit event, the stored event's status; 12 for a decline, which posts no entries);
on PostgreSQL the same 13 (12) and a commit. And the plain case's attempt came before it too.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.db.migrate import MIGRATIONS_PATH
from paycore.http.app import create_app
from paycore.inbound import apply_payment, receive, service
from paycore.inbound.service import Received
from paycore.invariants import service as invariants
from paycore.kit import signing
from paycore.kit.clock import to_rfc3339
from paycore.ledger import service as ledger
from tests.integration.inbound.test_receive_data_plane import crafted, references, signed, tenant_of
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_settle_data_plane import WebhookFirst, normal, role_names, rows_of, totals_of
from tests.support.statements import counting

__all__ = ["references"]  # the fixture, shared with the plain case's tests

TOKENS = {"processing": "tok_pending", "in_doubt": "tok_timeout"}
AMOUNT_MINOR = 4321
# (statements, commits) of `receive.receive` for a webhook that moves a payment, by database and outcome.
APPLY_COST = {
    ("sqlite", "succeeded"): (12, 1),
    ("sqlite", "failed"): (11, 1),
    ("postgresql", "succeeded"): (2, 0),
    ("postgresql", "failed"): (2, 0),
}
REFERENCE_COST = {  # the reference path's, `service.receive` alone, for the same events (docstring)
    ("sqlite", "succeeded"): (14, 1),
    ("sqlite", "failed"): (13, 1),
    ("postgresql", "succeeded"): (13, 1),
    ("postgresql", "failed"): (12, 1),
}


def waiting(env: Env, destination: str, start: str) -> str:
    """A payment to `destination` left `processing` (the processor said `pending`) or `in_doubt`
    (no answer), its request answered 202."""
    response = env.pay(destination, token=TOKENS[start], amount_minor=AMOUNT_MINOR)
    assert response.status_code == 202 and response.json()["status"] == start, response.text
    return str(response.json()["id"])


def event_for(env: Env, payment_id: str, outcome: str) -> bytes:
    """The processor's webhook settling the payment: `charge.succeeded`, or `charge.failed`."""
    changes: dict[str, Any] = {"type": f"charge.{outcome}", "data": {"status": outcome}}
    if outcome == "failed":
        changes["data"]["failure_code"] = "card_declined"
    return crafted(payment_id, tenant_of(env.database, payment_id), **changes)


def dialect(env: Env) -> str:
    return env.database.engine.dialect.name


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_moving_webhook_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    env: Env, outcome: str, references: list[str]
) -> None:
    destination = env.account()
    env.pay(destination)  # this process learns the accounts
    body = event_for(env, waiting(env, destination, "processing"), outcome)
    with counting(env.database) as statements:
        received = receive.receive(env.database, *signed(env, body))
    assert received == Received(json.loads(body)["id"], "applied") and references == []
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == APPLY_COST[(dialect(env), outcome)], statements
    if dialect(env) == "postgresql":
        assert run[0].startswith("SELECT paycore_inbound_receive(") and run[1].startswith(
            "SELECT paycore_inbound_apply_payment("
        ), run
    else:
        assert run[:2] == ["BEGIN IMMEDIATE", run[1]] and run[1].startswith("INSERT INTO processor_webhooks"), run
        assert run[2] == "BEGIN IMMEDIATE" and run[4].startswith("INSERT INTO processor_webhooks"), run
    with counting(env.database) as statements:
        assert receive.receive(env.database, *signed(env, body)).result == "duplicate"
    assert references == [] and len([sql for sql in statements if sql != "COMMIT"]) <= 2, statements


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_the_reference_path_costs_what_the_docstring_says(env: Env, outcome: str) -> None:
    destination = env.account()
    env.pay(destination)
    body = event_for(env, waiting(env, destination, "processing"), outcome)
    with counting(env.database) as statements:
        assert service.receive(env.database, *signed(env, body)).result == "applied"
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == REFERENCE_COST[(dialect(env), outcome)], statements


class Moved:
    """A payment moved by its webhook: its rows with every id and time named by its role, what
    the webhook added to its two accounts' totals, and what each delivery answered."""

    def __init__(self, env: Env, destination: str, start: str, outcome: str, deliver: Callable[..., Received]) -> None:
        payment_id = waiting(env, destination, start)
        body = event_for(env, payment_id, outcome)
        before = totals_of(env.database, destination)
        self.results = [deliver(env.database, *signed(env, body)).result for _ in range(2)]
        after = totals_of(env.database, destination)
        self.totals = {
            role: {name: after[role][name] - before[role][name] for name in after[role]}
            for role in ("clearing", "destination")
        }
        rows = rows_of(env.database, payment_id)
        with env.database.read() as connection:
            rows["webhooks"] = [
                dict(row)
                for row in connection.execute(
                    text("SELECT * FROM processor_webhooks WHERE request_id = :p"), {"p": payment_id}
                ).mappings()
            ]
        names = role_names(rows, destination)
        names[json.loads(body)["id"]] = "WEBHOOK"
        for index, row in enumerate(rows["events"]):  # the call's time, the move to in doubt
            names.setdefault(row["created_at_us"], f"AT{index}")
            names.setdefault(to_rfc3339(row["created_at_us"]), names[row["created_at_us"]])
        for row in rows["events"]:  # the charge id the processor's `pending` answer gave
            charge_id = (json.loads(row["data"]).get("response") or {}).get("processor_charge_id")
            if charge_id is not None:
                names.setdefault(charge_id, "ANSWERED_CHARGE")
        if rows["payment"]["in_doubt_since_us"] is not None:
            names.setdefault(rows["payment"]["in_doubt_since_us"], "IN_DOUBT_SINCE")
        self.rows = normal(rows, names)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("start", ["processing", "in_doubt"])
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_the_data_plane_writes_what_the_reference_path_writes(
    env: Env, start: str, outcome: str, references: list[str]
) -> None:
    fast_destination, reference_destination = env.account("merchant.fast"), env.account("merchant.reference")
    env.pay(fast_destination)  # the clearing account exists before either payment measured

    fast = Moved(env, fast_destination, start, outcome, receive.receive)
    assert references == [], "the data plane moved it"
    reference = Moved(env, reference_destination, start, outcome, service.receive)

    assert fast.results == reference.results == ["applied", "duplicate"]
    assert fast.rows == reference.rows
    assert fast.totals == reference.totals
    assert fast.rows["payment"]["status"] == outcome
    assert [row["kind"] for row in fast.rows["transfers"]] == ["pending", "post" if outcome == "succeeded" else "void"]
    assert [(row["status"], row["attempts"]) for row in fast.rows["webhooks"]] == [("applied", 1)]
    posted = AMOUNT_MINOR if outcome == "succeeded" else 0
    assert fast.totals["destination"]["credits_posted_minor"] == posted
    assert fast.totals["destination"]["credits_pending_minor"] == -AMOUNT_MINOR
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []


# ------------------------------------------------------------------ everything else: the reference path


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_webhook_that_overtook_its_request_is_the_reference_paths(env: Env, references: list[str]) -> None:
    """The payment is `processing` and its request has not answered yet: the reference path
    writes the request's answer with the move, so the data plane leaves it to it."""
    destination = env.account()
    delivered: list[str] = []

    def deliver() -> int:
        for body in _due_webhooks(env):
            delivered.append(receive.receive(env.database, *signed(env, body)).result)
        return len(delivered)

    processor = WebhookFirst(env.processor, deliver)
    with TestClient(create_app(env.settings, env.database, processor)) as client:
        response = client.post(
            "/v1/payments",
            json={
                "amount_minor": 1234,
                "currency": "USD",
                "source": {"type": "card", "token": "tok_ok"},
                "destination_account": destination,
            },
            headers={"Idempotency-Key": "webhook-overtook"},
        )
    assert delivered == ["applied"] and references == ["applied"], "the reference path moved it"
    assert response.status_code == 201, response.text
    assert env.balance(destination)["posted_minor"] == 1234


def _due_webhooks(env: Env) -> list[bytes]:
    taken: list[bytes] = []

    def sink(body: bytes, headers: dict[str, str]) -> int:
        taken.append(body)
        return 200

    env.sandbox.deliver_due(sink)
    return taken


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("start", ["processing", "in_doubt"])
def test_another_amount_is_the_reference_paths_mismatch(env: Env, start: str, references: list[str]) -> None:
    payment_id = waiting(env, env.account(), start)
    body = crafted(payment_id, tenant_of(env.database, payment_id), data={"amount_minor": AMOUNT_MINOR + 1})
    before = rows_of(env.database, payment_id)
    assert receive.receive(env.database, *signed(env, body)).result == "mismatch"
    assert references == ["mismatch"]
    assert rows_of(env.database, payment_id)["payment"] == before["payment"], "nothing moved"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_plan_is_made_for_the_payment_as_read_only(env: Env) -> None:
    """The planner's own refusals: an authorization's event, a payment settled already."""
    payment_id = waiting(env, env.account(), "processing")
    tenant = tenant_of(env.database, payment_id)
    manual = crafted(payment_id, tenant, type="charge.succeeded", data={"capture": "manual"})
    event = service.verified_event(*signed(env, manual))
    with env.database.read() as connection:
        assert apply_payment.PAYMENT.plan_of(connection, event, manual) is None
    moving = event_for(env, payment_id, "succeeded")
    assert receive.receive(env.database, *signed(env, moving)).result == "applied"
    again = crafted(payment_id, tenant)
    with env.database.read() as connection:
        assert apply_payment.PAYMENT.plan_of(connection, service.verified_event(*signed(env, again)), again) is None


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_schema_without_the_function_moves_it_by_the_reference_path(env: Env, references: list[str]) -> None:
    """A PostgreSQL database one revision behind: the call fails with 42883 having written
    nothing, and the reference path applies the event as before. The function is put back."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    [path] = (MIGRATIONS_PATH / "versions").glob("*_inbound_apply_payment.py")
    spec = importlib.util.spec_from_file_location("inbound_apply_payment_migration", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    destination = env.account()
    body = event_for(env, waiting(env, destination, "in_doubt"), "succeeded")
    with env.database.autocommit() as connection:
        connection.execute(text(f"DROP FUNCTION {migration._APPLY_PAYMENT}"))
    try:
        received = receive.receive(env.database, *signed(env, body))
    finally:
        with env.database.autocommit() as connection:
            connection.execute(text(migration._CREATE_APPLY_PAYMENT))
    assert received.result == "applied" and references == ["applied"]
    assert env.balance(destination)["posted_minor"] == AMOUNT_MINOR


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("start", ["processing", "in_doubt"])
def test_the_route_moves_it_on_the_data_plane(env: Env, start: str, references: list[str]) -> None:
    """`POST /v1/webhooks/processor` (its thin edge: on SQLite the apply phase joins the group
    commit from the event loop, on PostgreSQL the whole receive runs on one worker thread)."""
    destination = env.account()
    body = event_for(env, waiting(env, destination, start), "succeeded")
    _, signature, _ = signed(env, body)
    headers = {signing.SIGNATURE_HEADER: signature, "Content-Type": "application/json"}
    for expected in ("applied", "duplicate"):
        response = env.client.post("/v1/webhooks/processor", content=body, headers=headers)
        assert response.status_code == 200 and response.json()["result"] == expected, response.text
    assert references == [], "the data plane answered both"
    assert env.balance(destination)["posted_minor"] == AMOUNT_MINOR
