"""The processor's webhook's receive on the data plane (ADR 0026 step 3, issue 39), on both
databases.

- What it costs in SQL, counted (never timed) around `receive.receive` alone, as
  tests/integration/payments/test_settle_data_plane.py counts the settle phase: one call on
  PostgreSQL (no client commit); BEGIN IMMEDIATE and the fixed list on SQLite (2 statements,
  a redelivery 1), one commit.
- That it writes what the reference path (`inbound.service.receive`) writes for the same
  event, row for row (the stored event, the payment's audit event), and answers the same,
  succeeded and declined, and for a redelivery.
- That every other event goes to the reference path, which writes and answers as it always
  has: an unknown payment, another
  amount (a mismatch), a contradiction (a conflict), a `pending` charge, a refund's event, a
  type its status does not match, a schema without the function (a payment still `processing`
  or in doubt is the apply phase's: test_apply_data_plane.py); and a bad signature or body
  is refused before anything, as before.

Before the data plane (counted the same way, the reference path): BEGIN IMMEDIATE and 4
statements (the event stored, the payment read, the audit event, the stored event's status) on
SQLite; the same 4 and a commit on PostgreSQL. A redelivery: 1 statement (and BEGIN) and a
commit on each.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.db.migrate import MIGRATIONS_PATH
from paycore.inbound import receive, service
from paycore.inbound.service import InvalidSignature, InvalidWebhook, Received
from paycore.kit import signing
from paycore.kit.clock import now_us
from tests.integration.payments.conftest import Env
from tests.support.statements import counting

TOKENS = {"succeeded": "tok_ok", "failed": "tok_declined"}
STATUS_CODES = {"succeeded": 201, "failed": 402}
# (statements, commits) of receive alone, by database and what it answered.
RECEIVE_COST = {
    ("sqlite", "stale"): (3, 1),
    ("sqlite", "duplicate"): (2, 1),
    ("postgresql", "stale"): (1, 0),
    ("postgresql", "duplicate"): (1, 0),
}
REFERENCE_COST = {  # the reference path's, for the same events (docstring)
    ("sqlite", "stale"): (5, 1),
    ("sqlite", "duplicate"): (2, 1),
    ("postgresql", "stale"): (4, 1),
    ("postgresql", "duplicate"): (1, 1),
}


@pytest.fixture
def references(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The results `service.receive` (the reference path) answered for `receive.receive`."""
    found: list[str] = []
    real = service.receive

    def spy(*args: Any, **kwargs: Any) -> Received:
        received = real(*args, **kwargs)
        found.append(received.result)
        return received

    monkeypatch.setattr(service, "receive", spy)
    return found


def webhooks(env: Env) -> list[bytes]:
    """The bodies of the sandbox's due webhooks, taken (answered 200) and not delivered."""
    taken: list[bytes] = []

    def sink(body: bytes, headers: dict[str, str]) -> int:
        taken.append(body)
        return 200

    env.sandbox.deliver_due(sink)
    return taken


def signed(env: Env, body: bytes) -> tuple[str, str, bytes]:
    secret = env.settings.processor_webhook_secret
    return secret, signing.sign(secret, now_us() // 1_000_000, body), body


def settled(env: Env, outcome: str, amount_minor: int = 4321) -> tuple[str, bytes]:
    """A payment the processor's answer settled (`outcome`), and its webhook's body."""
    response = env.pay(env.account(), token=TOKENS[outcome], amount_minor=amount_minor)
    assert response.status_code == STATUS_CODES[outcome], response.text
    [body] = webhooks(env)
    assert json.loads(body)["type"] == f"charge.{outcome}"
    return str(response.json()["id"]), body


def dialect(env: Env) -> str:
    return env.database.engine.dialect.name


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_receive_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    env: Env, outcome: str, references: list[str]
) -> None:
    _, body = settled(env, outcome)
    for expected in ("stale", "duplicate"):
        with counting(env.database) as statements:
            received = receive.receive(env.database, *signed(env, body))
        assert received == Received(json.loads(body)["id"], expected)
        run = [sql for sql in statements if sql != "COMMIT"]
        assert (len(run), statements.count("COMMIT")) == RECEIVE_COST[(dialect(env), expected)], statements
        if dialect(env) == "postgresql":
            assert run == [run[0]] and run[0].startswith("SELECT paycore_inbound_receive("), run
        else:
            assert run[0] == "BEGIN IMMEDIATE" and run[1].startswith("INSERT INTO processor_webhooks"), run
    assert references == [], "the data plane answered both"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_the_reference_path_costs_what_the_docstring_says(env: Env) -> None:
    _, body = settled(env, "succeeded")
    for expected in ("stale", "duplicate"):
        with counting(env.database) as statements:
            received = service.receive(env.database, *signed(env, body))
        assert received.result == expected
        run = [sql for sql in statements if sql != "COMMIT"]
        assert (len(run), statements.count("COMMIT")) == REFERENCE_COST[(dialect(env), expected)], statements


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_the_data_plane_writes_what_the_reference_path_writes(env: Env, outcome: str, references: list[str]) -> None:
    fast_payment, fast_body = settled(env, outcome)
    reference_payment, reference_body = settled(env, outcome)
    before = [rows_of(env.database, payment)["payment"] for payment in (fast_payment, reference_payment)]
    fast = [receive.receive(env.database, *signed(env, fast_body)) for _ in range(2)]
    assert references == []
    reference = [service.receive(env.database, *signed(env, reference_body)) for _ in range(2)]
    assert [received.result for received in fast] == [received.result for received in reference]
    assert [received.result for received in fast] == ["stale", "duplicate"]
    fast_rows, reference_rows = rows_of(env.database, fast_payment), rows_of(env.database, reference_payment)
    assert normal(fast_rows, fast_payment) == normal(reference_rows, reference_payment)
    assert len(fast_rows["webhooks"]) == 1 and len(fast_rows["webhook_events"]) == 1
    assert [fast_rows["payment"], reference_rows["payment"]] == before, "neither moved the payment"


def rows_of(database: Database, payment_id: str) -> dict[str, Any]:
    """The payment, its stored webhooks and its webhook audit events."""
    with database.read() as connection:

        def read(sql: str) -> list[dict[str, Any]]:
            return [dict(row) for row in connection.execute(text(sql), {"p": payment_id}).mappings()]

        [payment] = read("SELECT * FROM payments WHERE id = :p")
        webhook_rows = read("SELECT * FROM processor_webhooks WHERE request_id = :p ORDER BY event_id")
        events = read("SELECT * FROM events WHERE object_id = :p AND kind = 'webhook' ORDER BY created_at_us, id")
    return {"payment": payment, "webhooks": webhook_rows, "webhook_events": events}


def normal(rows: dict[str, Any], payment_id: str) -> dict[str, Any]:
    """The stored webhooks and audit events with each id and time named by its role."""
    names: dict[Any, str] = {payment_id: "PAYMENT"}
    for index, row in enumerate(rows["webhooks"]):
        names[row["event_id"]] = f"WEBHOOK{index}"
        names[row["created_at_us"]] = f"RECEIVED{index}"
        payload = json.loads(row["payload"])
        names[payload["data"]["processor_charge_id"]] = "CHARGE"
        names[payload["created_at"]] = "SENT"
    for index, row in enumerate(rows["webhook_events"]):
        names[row["id"]] = f"EVENT{index}"

    def named(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: named(item) for key, item in value.items()}
        if isinstance(value, str) and value[:1] == "{":
            return named(json.loads(value))
        return names.get(value, value) if isinstance(value, str | int) and not isinstance(value, bool) else value

    return {table: [named(row) for row in rows[table]] for table in ("webhooks", "webhook_events")}


# ------------------------------------------------------------------ everything else: the reference path


def crafted(payment_id: str, tenant_id: str, **changed: Any) -> bytes:
    """A charge event for the payment, as the sandbox sends one, with fields changed."""
    data = {
        "object": "charge",
        "request_id": payment_id,
        "merchant_id": tenant_id,
        "status": "succeeded",
        "amount_minor": 4321,
        "currency": "USD",
        "processor_charge_id": f"ch_{payment_id}",
        **changed.pop("data", {}),
    }
    document = {
        "id": f"evt_{payment_id}_{now_us()}",
        "type": "charge.succeeded",
        "created_at": "2026-12-06T00:00:00Z",
        "sequence": 2,
        "data": data,
        **changed,
    }
    return json.dumps(document).encode()


def tenant_of(database: Database, payment_id: str) -> str:
    with database.read() as connection:
        return str(connection.execute(text("SELECT tenant_id FROM payments WHERE id = :p"), {"p": payment_id}).scalar())


# (what it is, the event's changes, what the reference path answers; None: whatever it answers)
FALLBACKS: list[tuple[str, dict[str, Any], str | None]] = [
    ("another amount: a mismatch", {"data": {"amount_minor": 4322}}, "mismatch"),
    ("another currency: a mismatch", {"data": {"currency": "EUR"}}, "mismatch"),
    ("a contradiction: a conflict", {"type": "charge.failed", "data": {"status": "failed"}}, "conflict"),
    ("a pending charge", {"type": "charge.pending", "data": {"status": "pending"}}, "stale"),
    ("a type its status does not say", {"type": "charge.succeeded", "data": {"status": "failed"}}, "conflict"),
    ("an unknown payment", {"data": {"request_id": "pay_unknown"}}, "unmatched"),
    ("a type of another object", {"type": "refund.succeeded", "data": {"object": "refund"}}, "unmatched"),
    ("a capture's type (issue 40)", {"type": "charge.captured"}, None),
]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize(("name", "changes", "expected"), FALLBACKS, ids=[case[0] for case in FALLBACKS])
def test_every_other_event_is_the_reference_paths(
    env: Env, name: str, changes: dict[str, Any], expected: str | None, references: list[str]
) -> None:
    payment_id, _ = settled(env, "succeeded")
    body = crafted(payment_id, tenant_of(env.database, payment_id), **changes)
    before = rows_of(env.database, payment_id)
    received = receive.receive(env.database, *signed(env, body))
    assert received == Received(json.loads(body)["id"], expected or received.result), name
    assert references == [received.result], "answered by the reference path alone"
    after = rows_of(env.database, payment_id)
    assert after["payment"] == before["payment"], "nothing moved"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_webhook_for_a_payment_still_processing_settles_it_through_the_apply_phase(
    env: Env, references: list[str]
) -> None:
    """`tok_pending`: the processor answers `pending`, the payment stays `processing`, and the
    webhook that settles it later is not the plain case: the data plane's apply phase moves it
    (`inbound/apply_payment.py`, tests/integration/inbound/test_apply_data_plane.py)."""
    destination = env.account()
    response = env.pay(destination, token="tok_pending", amount_minor=4321)
    payment_id = str(response.json()["id"])
    assert response.json()["status"] == "processing", response.text
    body = crafted(payment_id, tenant_of(env.database, payment_id))
    received = receive.receive(env.database, *signed(env, body))
    assert received.result == "applied" and references == []
    assert receive.receive(env.database, *signed(env, body)).result == "duplicate"
    assert references == [], "the redelivery answered by the data plane"
    assert env.balance(destination)["posted_minor"] == 4321
    rows = rows_of(env.database, payment_id)
    assert rows["payment"]["status"] == "succeeded" and len(rows["webhook_events"]) == 1


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_bad_signature_or_body_is_refused_before_anything(env: Env, references: list[str]) -> None:
    payment_id, body = settled(env, "succeeded")
    secret, signature, _ = signed(env, body)
    with pytest.raises(InvalidSignature):
        receive.receive(env.database, secret, signature.replace("v1=", "v1=0"), body)
    with pytest.raises(InvalidSignature):
        receive.receive(env.database, secret, None, body)
    late = signing.sign(secret, now_us() // 1_000_000 - 3600, body)
    with pytest.raises(InvalidSignature) as refused:
        receive.receive(env.database, secret, late, body)
    assert refused.value.code.startswith("signature_timestamp")
    with pytest.raises(InvalidWebhook):
        receive.receive(env.database, *signed(env, b'{"id": "evt_1"}'))
    assert references == [] and rows_of(env.database, payment_id)["webhooks"] == []


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_schema_without_the_function_is_received_by_the_reference_path(env: Env, references: list[str]) -> None:
    """A PostgreSQL database one revision behind: the call fails with 42883 having written
    nothing, and the reference path receives the event as before. The function is put back."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    [path] = (MIGRATIONS_PATH / "versions").glob("*_inbound_receive.py")
    spec = importlib.util.spec_from_file_location("inbound_receive_migration", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    payment_id, body = settled(env, "succeeded")
    with env.database.autocommit() as connection:
        connection.execute(text(f"DROP FUNCTION {migration._SIGNATURE}"))
    try:
        received = receive.receive(env.database, *signed(env, body))
    finally:
        with env.database.autocommit() as connection:
            connection.execute(text(migration._CREATE))
    assert received.result == "stale" and references == ["stale"]
    assert len(rows_of(env.database, payment_id)["webhook_events"]) == 1
