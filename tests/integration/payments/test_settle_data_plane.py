"""A payment's settle phase on the data plane (ADR 0026 step 3, issue 39), on both databases.

- What the phase costs in SQL, counted (never timed) around `settle.settle` alone, as
  tests/integration/http/test_credits_data_plane.py counts a credit: one call on PostgreSQL;
  BEGIN IMMEDIATE and the fixed list on SQLite (8 statements for a success, 7 for a decline,
  which writes no entries, 4 for an authorization, whose hold stays pending), one commit.
- That it writes what the reference path (`create_payment`'s `finish`) writes for the same
  payment, row for row (the payment, the hold's resolution and entries, the events with their
  sequence and snapshot, the key's answer, the accounts' totals), succeeded and declined, and
  for an authorization (`capture: "manual"`, ADR 0029) authorized (`requires_capture`, on
  `paycore_payments_authorize`) and declined (its answer carries the authorization's lifetime,
  which the payment keeps: `paycore_payments_settle`'s last argument since migration 0039).
- That a webhook that came first wins: the compare-and-set finds the payment moved, nothing is
  written twice, and the reference path records the call and replays the webhook's answer.

Before the data plane (main at 6299658, counted the same way): 13 statements (BEGIN IMMEDIATE,
the payment read FOR UPDATE, the call's event, the compare-and-set, the hold read back, its
resolution, the accounts' read, two totals, the entries, the state event, the events read
back, the key's answer) on SQLite; the same 12 without BEGIN on PostgreSQL; one commit each.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.db.migrate import MIGRATIONS_PATH
from paycore.http.app import create_app
from paycore.idempotency.service import Outcome
from paycore.invariants import service as invariants
from paycore.kit.clock import to_rfc3339
from paycore.ledger import service as ledger
from paycore.payments import settle
from paycore.processor.port import ChargeRequest, ChargeResult, Processor
from tests.integration.payments.conftest import Env
from tests.support.statements import counting

# (statements, commits) of the settle phase alone, by database and outcome.
SETTLE_COST = {
    ("sqlite", "succeeded"): (9, 1),
    ("sqlite", "failed"): (8, 1),
    ("sqlite", "authorized"): (5, 1),
    ("sqlite", "declined authorization"): (8, 1),
    ("postgresql", "succeeded"): (1, 0),
    ("postgresql", "failed"): (1, 0),
    ("postgresql", "authorized"): (1, 0),
    ("postgresql", "declined authorization"): (1, 0),
}
OUTCOMES = ("succeeded", "failed", "authorized", "declined authorization")
TOKENS = {
    "succeeded": "tok_ok",
    "failed": "tok_declined",
    "authorized": "tok_ok",
    "declined authorization": "tok_declined",
}
STATUS_CODES = {"succeeded": 201, "failed": 402, "authorized": 201, "declined authorization": 402}
STATUSES = {
    "succeeded": "succeeded",
    "failed": "failed",
    "authorized": "requires_capture",
    "declined authorization": "failed",
}
CAPTURE = {"authorized": "manual", "declined authorization": "manual"}  # else the default, automatic
FUNCTIONS = {"authorized": "paycore_payments_authorize"}  # else paycore_payments_settle
HOLDS = {"succeeded": ["pending", "post"], "authorized": ["pending"]}  # else voided


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[Outcome | None]:
    """What each settle phase answered (None: it left the payment to the reference path)."""
    found: list[Outcome | None] = []
    real = settle.settle

    def spy(*args: Any, **kwargs: Any) -> Outcome | None:
        answer = real(*args, **kwargs)
        found.append(answer)
        return answer

    monkeypatch.setattr(settle, "settle", spy)
    return found


def reference_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on every payment is settled by the reference path alone, as before step 3."""
    monkeypatch.setattr(settle, "settle", lambda *args, **kwargs: None)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_the_settle_phase_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    env: Env, outcome: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = env.account()
    assert env.pay(destination).status_code == 201  # this process learns the accounts
    counted: list[list[str]] = []
    real = settle.settle

    def counted_settle(*args: Any, **kwargs: Any) -> Outcome | None:
        with counting(env.database) as statements:
            answer = real(*args, **kwargs)
        counted.append(statements)
        return answer

    monkeypatch.setattr(settle, "settle", counted_settle)
    response = env.pay(destination, token=TOKENS[outcome], capture=CAPTURE.get(outcome))
    assert response.status_code == STATUS_CODES[outcome], response.text
    assert response.json()["status"] == STATUSES[outcome]
    [statements] = counted
    run = [sql for sql in statements if sql != "COMMIT"]
    dialect = env.database.engine.dialect.name
    assert (len(run), statements.count("COMMIT")) == SETTLE_COST[(dialect, outcome)], statements
    if dialect == "postgresql":
        function = FUNCTIONS.get(outcome, "paycore_payments_settle")
        assert run[0].startswith(("SELECT * FROM " if outcome != "authorized" else "SELECT ") + function + "("), run
    else:
        assert run[0] == "BEGIN IMMEDIATE" and run[1].startswith("UPDATE payments SET status = ?"), run


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_the_data_plane_writes_what_the_reference_path_writes(
    env: Env, outcome: str, answers: list[Outcome | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_destination, reference_destination = env.account("merchant.fast"), env.account("merchant.reference")
    env.pay(fast_destination)  # the clearing account exists before either payment measured

    fast = paid(env, fast_destination, outcome)
    assert answers[-1] is not None, "the data plane settled it"
    assert (answers[-1].status, answers[-1].body) == (fast.response.status_code, fast.response.text)
    reference_only(monkeypatch)
    reference = paid(env, reference_destination, outcome)

    assert fast.response.status_code == reference.response.status_code == STATUS_CODES[outcome]
    assert fast.rows == reference.rows
    assert fast.totals == reference.totals
    assert fast.rows["key"]["response_body"] == normal_text(fast.response.text, fast.names)
    assert [row["kind"] for row in fast.rows["transfers"]] == HOLDS.get(outcome, ["pending", "void"])
    assert fast.rows["payment"]["status"] == STATUSES[outcome]
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_webhook_that_came_first_is_replayed_and_nothing_is_written_twice(
    env: Env, answers: list[Outcome | None]
) -> None:
    """The processor's webhook is applied while the API's call is still returning: the settle
    phase's compare-and-set finds the payment succeeded, writes nothing, and the reference path
    records the call and answers with what the webhook recorded."""
    destination = env.account()
    processor = WebhookFirst(env.processor, env.deliver)
    with TestClient(create_app(env.settings, env.database, processor)) as client:
        response = client.post(
            "/v1/payments",
            json={
                "amount_minor": 1234,
                "currency": "USD",
                "source": {"type": "card", "token": "tok_ok"},
                "destination_account": destination,
            },
            headers={"Idempotency-Key": "webhook-first"},
        )
    assert processor.delivered == [1], "the webhook was applied before the API's settle phase"
    assert answers == [None], "the data plane wrote nothing: the compare-and-set lost"
    assert response.status_code == 201, response.text
    body = response.json()
    assert [(step["from"], step["to"], step["cause"]) for step in body["history"]] == [
        (None, "processing", "api_request"),
        ("processing", "succeeded", "webhook"),
    ]
    rows = rows_of(env.database, body["id"])
    assert [row["kind"] for row in rows["transfers"]] == ["pending", "post"]
    assert len(rows["entries"]) == 4
    kinds = [(row["kind"], row["cause"]) for row in rows["events"]]
    assert sorted(kinds) == sorted(
        [
            ("state_change", "api_request"),
            ("webhook", "applied"),
            ("state_change", "webhook"),
            ("processor_call", "answered"),
        ]
    )
    assert [row["object_sequence"] for row in rows["events"] if row["kind"] == "state_change"] == [1, 2]
    assert (rows["key"]["response_status"], rows["key"]["response_body"]) == (201, response.text)
    assert env.balance(destination)["posted_minor"] == 1234
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []


class WebhookFirst:
    """The sandbox processor, whose webhooks for a charge are delivered to paycore before the
    charge's answer returns to the API: a webhook that overtook the answer."""

    def __init__(self, inner: Processor, deliver: Callable[[], int]) -> None:
        self.inner, self.deliver = inner, deliver
        self.delivered: list[int] = []

    def charge(self, request: ChargeRequest) -> ChargeResult:
        result = self.inner.charge(request)
        self.delivered.append(self.deliver())
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# ------------------------------------------------------------------ rows, compared


class Paid:
    def __init__(self, response: Any, rows: dict[str, Any], totals: dict[str, Any], names: dict[Any, str]) -> None:
        self.response, self.rows, self.totals, self.names = response, rows, totals, names


def paid(env: Env, destination: str, outcome: str) -> Paid:
    """One payment to `destination`: its answer, its rows with every id and time named by its
    role, and what it added to its two accounts' totals."""
    before = totals_of(env.database, destination)
    response = env.pay(destination, token=TOKENS[outcome], amount_minor=4321, capture=CAPTURE.get(outcome))
    assert response.status_code == STATUS_CODES[outcome], response.text
    after = totals_of(env.database, destination)
    rows = rows_of(env.database, response.json()["id"])
    names = role_names(rows, destination)
    deltas = {
        role: {name: after[role][name] - before[role][name] for name in after[role]}
        for role in ("clearing", "destination")
    }
    return Paid(response, normal(rows, names), deltas, names)


_TOTALS = "debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count"


def totals_of(database: Database, destination: str) -> dict[str, dict[str, int]]:
    with database.read() as connection:
        found = {}
        for role, where in (("destination", "id = :a"), ("clearing", "code = 'processor.clearing.USD'")):
            row = connection.execute(
                text(f"SELECT {_TOTALS} FROM ledger_accounts WHERE {where}"), {"a": destination}
            ).mappings()
            found[role] = dict(row.one())
    return found


def rows_of(database: Database, payment_id: str) -> dict[str, Any]:
    """Every row the payment wrote, in a fixed order."""
    with database.read() as connection:

        def read(sql: str, **params: Any) -> list[dict[str, Any]]:
            return [dict(row) for row in connection.execute(text(sql), params).mappings()]

        [payment] = read("SELECT * FROM payments WHERE id = :p", p=payment_id)
        tenant = payment["tenant_id"]
        transfers = read(
            "SELECT * FROM ledger_transfers WHERE tenant_id = :t AND owner_id = :p ORDER BY kind = 'pending' DESC, id",
            t=tenant,
            p=payment_id,
        )
        entries = read(
            "SELECT e.* FROM ledger_entries e JOIN ledger_transfers t ON t.tenant_id = e.tenant_id"
            " AND t.id = e.transfer_id WHERE t.tenant_id = :t AND t.owner_id = :p"
            " ORDER BY t.kind = 'pending' DESC, e.id",
            t=tenant,
            p=payment_id,
        )
        events = read(
            "SELECT * FROM events WHERE tenant_id = :t AND object_id = :p ORDER BY created_at_us, id",
            t=tenant,
            p=payment_id,
        )
        [key] = read(
            'SELECT * FROM idempotency_keys WHERE tenant_id = :t AND "key" = :k', t=tenant, k=payment["idempotency_key"]
        )
    return {"payment": payment, "transfers": transfers, "entries": entries, "events": events, "key": key}


def role_names(rows: dict[str, Any], destination: str) -> dict[Any, str]:
    """Each id, key, reference and time the payment's rows hold, by its role in them."""
    payment = rows["payment"]
    names: dict[Any, str] = {
        payment["id"]: "PAYMENT",
        payment["idempotency_key"]: "KEY",
        rows["key"]["fingerprint"]: "FINGERPRINT",  # of a body naming its destination
        destination: "DESTINATION",
        payment["created_at_us"]: "ACCEPTED_AT",
        payment["updated_at_us"]: "SETTLED_AT",
    }
    if payment["processor_reference"] is not None:
        names[payment["processor_reference"]] = "CHARGE"
    for index, row in enumerate(rows["transfers"]):
        names[row["id"]] = f"TRANSFER{index}"
    for index, row in enumerate(rows["entries"]):
        names[row["id"]] = f"ENTRY{index}"
        if row["account_id"] != destination:
            names[row["account_id"]] = "CLEARING"
    for index, row in enumerate(rows["events"]):
        names[row["id"]] = f"EVENT{index}"
        request_id = json.loads(row["data"]).get("request_id")
        if request_id is not None:
            names.setdefault(request_id, f"REQUEST{len([n for n in names.values() if n.startswith('REQUEST')])}")
    if payment["authorization_expires_at_us"] is not None:
        names[payment["authorization_expires_at_us"]] = "EXPIRES_AT"
    for time_us in (payment["created_at_us"], payment["updated_at_us"], payment["authorization_expires_at_us"]):
        if time_us is not None:
            names[to_rfc3339(time_us)] = names[time_us]
    return names


def normal(rows: dict[str, Any], names: dict[Any, str]) -> dict[str, Any]:
    """The rows with each named value replaced by its name, JSON columns decoded, a call's
    latency left out, and each entry's number counted from the hold's on its account."""
    found = {table: normal_value(value, names) for table, value in rows.items()}
    holds = {entry["account_id"]: entry["account_sequence"] for entry in found["entries"][:2]}
    for entry in found["entries"]:
        entry["account_sequence"] -= holds[entry["account_id"]]
    return found


def normal_value(value: Any, names: dict[Any, str]) -> Any:
    if isinstance(value, dict):
        return {key: "LATENCY" if key == "latency_ms" else normal_value(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [normal_value(item, names) for item in value]
    if isinstance(value, str) and value[:1] in "{[":
        return normal_text(value, names)
    if isinstance(value, str | int) and not isinstance(value, bool) and value in names:
        return names[value]
    return value


def normal_text(encoded: str, names: dict[Any, str]) -> Any:
    return normal_value(json.loads(encoded), names)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_schema_without_the_function_is_settled_by_the_reference_path(
    env: Env, answers: list[Outcome | None]
) -> None:
    """A PostgreSQL database one revision behind (OLDEST_COMPATIBLE_REVISION stays below the
    function's): the call fails with 42883 having written nothing, and the reference path
    settles the payment as before. The function is put back afterwards (the test databases
    are reused)."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    # The signature this release calls: 0030's function with 0039's last argument.
    [path] = (MIGRATIONS_PATH / "versions").glob("*_inbound_apply.py")
    spec = importlib.util.spec_from_file_location("inbound_apply_migration", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    destination = env.account()
    with env.database.autocommit() as connection:
        connection.execute(text(f"DROP FUNCTION {migration._SETTLE}"))
    try:
        response = env.pay(destination)
    finally:
        with env.database.autocommit() as connection:
            connection.execute(text(migration._settle_0039()))
    assert response.status_code == 201, response.text
    assert answers == [None]
    assert response.json()["history"][-1]["cause"] == "processor_answer"
    assert env.balance(destination)["posted_minor"] == 1000


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_declined_authorization_is_settled_by_the_data_plane(env: Env, answers: list[Outcome | None]) -> None:
    """The processor's decline of an authorization names the lifetime it would have had, which
    the payment keeps: the settle writes it (on PostgreSQL `paycore_payments_settle`'s last
    argument, migration 0039), voids the hold and answers 402."""
    destination = env.account()
    response = env.pay(destination, token="tok_declined", capture="manual")
    assert response.status_code == 402, response.text
    assert answers[-1] is not None and (answers[-1].status, answers[-1].body) == (402, response.text)
    rows = rows_of(env.database, response.json()["id"])
    assert (rows["payment"]["status"], rows["payment"]["capture_method"]) == ("failed", "manual")
    assert rows["payment"]["authorization_expires_at_us"] is not None
    assert [row["kind"] for row in rows["transfers"]] == ["pending", "void"]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_schema_without_the_authorize_function_settles_an_authorization_by_the_reference_path(
    env: Env, answers: list[Outcome | None]
) -> None:
    """A PostgreSQL database at 0035 (OLDEST_COMPATIBLE_REVISION): no `paycore_payments_authorize`,
    the call fails with 42883 having written nothing, and the reference path authorizes."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    [path] = (MIGRATIONS_PATH / "versions").glob("*_payments_authorize.py")
    spec = importlib.util.spec_from_file_location("payments_authorize_migration", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    destination = env.account()
    with env.database.autocommit() as connection:
        connection.execute(text(f"DROP FUNCTION {migration._AUTHORIZE}"))
    try:
        response = env.pay(destination, capture="manual")
    finally:
        with env.database.autocommit() as connection:
            connection.execute(text(migration._CREATE_AUTHORIZE))
    assert response.status_code == 201, response.text
    assert answers == [None]
    assert response.json()["status"] == "requires_capture"
    assert response.json()["history"][-1]["cause"] == "processor_answer"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_function_the_database_cannot_run_is_settled_by_the_reference_path(
    env: Env, answers: list[Outcome | None]
) -> None:
    """On Citus the settle function's events numbering is refused with 0A000 ("subqueries are
    not supported within INSERT queries", ADR 0031), having written nothing: the reference path
    settles the payment. Here a stand-in with the function's signature raises 0A000; the
    function is put back afterwards (the test databases are reused)."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list calls no function")
    # The signature this release calls (0039's: the one with the most arguments; 0030's
    # signature is kept beside it as a one-line call of it, for the release before).
    [path] = (MIGRATIONS_PATH / "versions").glob("*_inbound_apply.py")
    spec = importlib.util.spec_from_file_location("inbound_apply_migration", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    destination = env.account()
    with env.database.autocommit() as connection:
        arguments, result = connection.execute(
            text(
                "SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid) FROM pg_proc p"
                " WHERE p.proname = 'paycore_payments_settle' ORDER BY p.pronargs DESC LIMIT 1"
            )
        ).one()
        connection.execute(text(f"DROP FUNCTION {migration._SETTLE}"))
        connection.execute(
            text(
                f"CREATE FUNCTION paycore_payments_settle({arguments}) RETURNS {result} LANGUAGE plpgsql AS $$ BEGIN"
                " RAISE EXCEPTION 'subqueries are not supported within INSERT queries'"
                " USING ERRCODE = 'feature_not_supported'; END $$"
            )
        )
    try:
        response = env.pay(destination)
    finally:
        with env.database.autocommit() as connection:
            connection.execute(text(f"DROP FUNCTION {migration._SETTLE}"))
            connection.execute(text(migration._settle_0039()))
    assert response.status_code == 201, response.text
    assert answers == [None]
    assert response.json()["history"][-1]["cause"] == "processor_answer"
    assert env.balance(destination)["posted_minor"] == 1000
