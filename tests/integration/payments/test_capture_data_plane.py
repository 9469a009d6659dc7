"""A capture's and a cancel's two phases on the data plane (ADR 0026 step 3, ADR 0029, issue
39), on both databases.

- What each phase costs in SQL, counted (never timed) around `capture.begin` and
  `capture.finish` alone: on PostgreSQL the authorization's read and one call, then one call;
  on SQLite BEGIN IMMEDIATE, the read and 3 statements, then BEGIN IMMEDIATE and the settle
  phase's list of 8 (7 for a cancel: the hold voided, no entry); one commit each.
- That they write what the reference path (`operations._begin`, `finish_by_reference`) writes for the same
  request, row for row (the payment, the hold's partial post, its entries, the events with their
  sequence and snapshot, both keys' answers, the accounts' totals).
- That everything not plain is the reference path's: a key that exists (its replay), a refusal
  (an amount past what is capturable, a payment not `requires_capture`), a schema without the
  functions (42883).
- That processes racing captures and cancels of one authorization on PostgreSQL make exactly
  one operation: the others are refused (409) before anything is sent.

Before (the reference path, counted the same way in `test_statement_counts.py`'s authorization
flow): the flow cost 44 statements on SQLite and 29 on PostgreSQL with the capture on the
reference path; 39 and 15 with it here.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, RefusalToRecord
from paycore.invariants import service as invariants
from paycore.kit import actors
from paycore.kit.clock import now_us, to_rfc3339
from paycore.ledger import service as ledger
from paycore.payments import capture, operations, states
from paycore.payments.service import PaymentTimings
from paycore.payments.types import Payment
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_settle_data_plane import normal, role_names, rows_of, totals_of
from tests.support.statements import counting

# (statements, commits) of each phase alone, by database.
BEGIN_COST = {"sqlite": (5, 1), "postgresql": (2, 1)}  # PostgreSQL: the read commits
FINISH_COST = {
    ("sqlite", "capture"): (9, 1),
    ("sqlite", "cancel"): (8, 1),
    ("postgresql", "capture"): (1, 0),
    ("postgresql", "cancel"): (1, 0),
}
OPERATIONS = ("capture", "cancel")
DONE = {"capture": "succeeded", "cancel": "canceled"}


@pytest.fixture
def phases(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What each phase answered (None: it left the request to the reference path)."""
    found: list[tuple[str, Any]] = []
    for name in ("begin", "finish"):
        real = getattr(capture, name)

        def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            answer = _real(*args, **kwargs)
            found.append((_name, answer))
            return answer

        monkeypatch.setattr(capture, name, spy)
    return found


def reference_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "begin", lambda *args, **kwargs: None)
    monkeypatch.setattr(capture, "finish", lambda *args, **kwargs: None)


def authorized(env: Env, destination: str, amount_minor: int = 4321) -> str:
    response = env.pay(destination, amount_minor=amount_minor, capture="manual")
    assert response.status_code == 201 and response.json()["status"] == "requires_capture", response.text
    return str(response.json()["id"])


def post_capture(env: Env, payment_id: str, key: str, amount_minor: int | None = 3000) -> Any:
    body = {} if amount_minor is None else {"amount_minor": amount_minor}
    return env.client.post(f"/v1/payments/{payment_id}/capture", json=body, headers={"Idempotency-Key": key})


def post_operation(env: Env, operation: str, payment_id: str, key: str) -> Any:
    """A capture of 3000, or a cancel."""
    if operation == "capture":
        return post_capture(env, payment_id, key)
    return env.client.post(f"/v1/payments/{payment_id}/cancel", json={}, headers={"Idempotency-Key": key})


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_phase_is_one_call_on_postgresql_and_a_fixed_list_on_sqlite(
    env: Env, operation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = env.account()
    payment_id = authorized(env, destination)
    counted: dict[str, list[str]] = {}
    for name in ("begin", "finish"):
        real = getattr(capture, name)

        def counted_phase(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            with counting(env.database) as statements:
                answer = _real(*args, **kwargs)
            counted[_name] = statements
            assert answer is not None, f"the data plane wrote the {_name}"
            return answer

        monkeypatch.setattr(capture, name, counted_phase)
    response = post_operation(env, operation, payment_id, "op")
    assert response.status_code == 200 and response.json()["status"] == DONE[operation], response.text
    dialect = env.database.engine.dialect.name
    for name, cost in (("begin", BEGIN_COST[dialect]), ("finish", FINISH_COST[(dialect, operation)])):
        statements = counted[name]
        run = [sql for sql in statements if sql != "COMMIT"]
        assert (len(run), statements.count("COMMIT")) == cost, (name, statements)
    if dialect == "postgresql":
        assert counted["begin"][-1].startswith(f"SELECT paycore_payments_{operation}_begin("), counted["begin"]
        finish = f"SELECT * FROM paycore_payments_{operation}_finish("
        assert counted["finish"][0].startswith(finish), counted["finish"]
    balance = env.balance(destination)
    assert (balance["posted_minor"], balance["pending_minor"]) == (3000 if operation == "capture" else 0, 0)


def captured(env: Env, destination: str, key: str, operation: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """An authorization of 4321 captured for 3000 (or canceled) under `key`: the answer, the rows
    (ids and times named by role) and what the whole flow added to the two accounts."""
    before = totals_of(env.database, destination)
    payment_id = authorized(env, destination)
    response = post_operation(env, operation, payment_id, key)
    assert response.status_code == 200, response.text
    after = totals_of(env.database, destination)
    rows = rows_of(env.database, payment_id)
    with env.database.read() as connection:
        rows["capture_key"] = dict(
            connection.execute(text('SELECT * FROM idempotency_keys WHERE "key" = :k'), {"k": key}).mappings().one()
        )
    names = role_names(rows, destination)
    names[key] = "CAPTURE_KEY"
    names[f"{payment_id}_{operation}"] = "OPERATION_REQUEST"  # the operation's stable request id
    names[rows["capture_key"]["fingerprint"]] = "CAPTURE_FINGERPRINT"  # names its payment's id
    for index, row in enumerate(rows["events"]):
        names.setdefault(row["created_at_us"], f"T{index}")
        names.setdefault(to_rfc3339(row["created_at_us"]), names[row["created_at_us"]])
    deltas = {
        role: {name: after[role][name] - before[role][name] for name in after[role]}
        for role in ("clearing", "destination")
    }
    return response, normal(rows, names), deltas


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_data_plane_writes_what_the_reference_path_writes(
    env: Env, operation: str, phases: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_destination, reference_destination = env.account("merchant.fast"), env.account("merchant.reference")
    env.pay(fast_destination)  # the clearing account exists before either flow measured
    fast_response, fast_rows, fast_totals = captured(env, fast_destination, "op-fast", operation)
    assert [name for name, answer in phases if answer is not None] == ["begin", "finish"], phases
    reference_only(monkeypatch)
    reference_response, reference_rows, reference_totals = captured(
        env, reference_destination, "op-reference", operation
    )

    assert fast_response.status_code == reference_response.status_code == 200
    for table in fast_rows:
        for mine, theirs in (
            zip(fast_rows[table], reference_rows[table], strict=True)
            if isinstance(fast_rows[table], list)
            else [(fast_rows[table], reference_rows[table])]
        ):
            assert mine == theirs, (table, {k: (v, theirs.get(k)) for k, v in mine.items() if theirs.get(k) != v})
    assert fast_rows == reference_rows
    assert fast_totals == reference_totals
    posted = 3000 if operation == "capture" else 0
    assert fast_totals["destination"]["credits_posted_minor"] == posted
    assert fast_totals["destination"]["credits_pending_minor"] == 0, "the rest released in the same step"
    assert [row["kind"] for row in fast_rows["transfers"]] == ["pending", "post" if posted else "void"]
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_what_is_not_plain_is_the_reference_paths(env: Env, phases: list[tuple[str, Any]]) -> None:
    destination = env.account()
    payment_id = authorized(env, destination, amount_minor=1000)
    too_much = post_capture(env, payment_id, "too-much", 1001)
    assert too_much.status_code == 422 and phases == [("begin", None)], too_much.text
    assert post_capture(env, payment_id, "too-much", 1001).status_code == 422  # its replay
    phases.clear()
    first = post_capture(env, payment_id, "all", None)
    assert first.status_code == 200 and first.json()["amount_captured_minor"] == 1000, first.text
    assert [name for name, answer in phases if answer is not None] == ["begin", "finish"]
    phases.clear()
    replay = post_capture(env, payment_id, "all", None)
    assert (replay.status_code, replay.text) == (200, first.text) and phases == [("begin", None)]
    phases.clear()
    again = post_capture(env, payment_id, "again", 10)
    assert again.status_code == 409 and again.json()["error"] == "payment_not_capturable", again.text
    assert phases == [("begin", None)]
    missing = post_capture(env, "pay_00000000000000000000000000", "missing", 10)
    assert missing.status_code == 404


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_schema_without_the_functions_is_the_reference_paths(
    env: Env, operation: str, phases: list[tuple[str, Any]]
) -> None:
    """A PostgreSQL database at 0035 (OLDEST_COMPATIBLE_REVISION): the calls fail with 42883
    having written nothing, and the reference path captures or cancels as before. The functions
    are put back afterwards (the test databases are reused)."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's lists need no new schema")
    from tests.integration.payments.test_accept_data_plane import ACCEPT_0036 as migration

    destination = env.account()
    payment_id = authorized(env, destination)
    functions = {
        migration._CAPTURE_BEGIN: migration._CREATE_CAPTURE_BEGIN,
        migration._CAPTURE_FINISH: migration._CREATE_CAPTURE_FINISH,
        migration._CANCEL_BEGIN: migration._CREATE_CANCEL_BEGIN,
        migration._CANCEL_FINISH: migration._CREATE_CANCEL_FINISH,
    }
    with env.database.autocommit() as connection:
        for signature in functions:
            connection.execute(text(f"DROP FUNCTION {signature}"))
    try:
        response = post_operation(env, operation, payment_id, "op")
    finally:
        with env.database.autocommit() as connection:
            for create in functions.values():
                connection.execute(text(create))
    assert response.status_code == 200 and response.json()["status"] == DONE[operation], response.text
    assert phases == [("begin", None), ("finish", None)], "each fell back: 42883"
    assert env.balance(destination)["posted_minor"] == (3000 if operation == "capture" else 0)


# ------------------------------------------------------------------ processes racing one authorization

RACERS = 6
TIMINGS = PaymentTimings(processing_stale_ms=60_000, wait_ms=1_000, first_retry_ms=1)


def _race(url: str, tenant_id: str, payment_id: str, index: int, barrier: Any, results: Any) -> None:
    """One process: the begin of a capture (even) or of a cancel (odd), each under its own key,
    through the data plane first as `operations._operate` runs it, started together; what it got."""
    database = Database(Settings(database_url=url, db_pool_size=1))
    operation = states.CAPTURE if index % 2 == 0 else states.CANCEL
    amount_minor = 500 if operation == states.CAPTURE else None
    scope = KeyScope(tenant_id, f"race-{index}", f"{index:064d}", now_us=now_us(), expires_at_us=None)

    def reference(connection: Any) -> Any:
        return operations._begin(
            connection, scope, payment_id, operation, amount_minor, actors.LOCAL, TIMINGS, render_refusal
        )

    try:
        barrier.wait(timeout=60)
        started: Any = capture.begin(
            database, scope, payment_id, operation, amount_minor, actor=actors.LOCAL, stale_ms=60_000
        )
        try:
            started = started or database.transaction(reference)
        except RefusalToRecord as refusal:
            results.put(f"refused {refusal.outcome.status}")
            return
        assert isinstance(started, Payment), started
        results.put(f"won {started.operation}")
    finally:
        database.dispose()


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_processes_racing_a_capture_and_a_cancel_make_one_operation(env: Env) -> None:
    """Captures and cancels on the data plane, several processes at once on PostgreSQL: exactly
    one compare-and-set wins; every other is refused with 409 (by the reference path, which a
    lost compare-and-set hands the request to) before anything is sent."""
    if not env.database.is_postgres:
        pytest.skip("across processes on PostgreSQL; SQLite's one writer serialises them")
    destination = env.account()
    payment_id = authorized(env, destination)
    with env.database.read() as connection:
        tenant_id = connection.execute(text("SELECT tenant_id FROM payments WHERE id = :p"), {"p": payment_id}).scalar()
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(RACERS), context.Queue()
    processes = [
        context.Process(target=_race, args=(env.settings.database_url, tenant_id, payment_id, index, barrier, results))
        for index in range(RACERS)
    ]
    for process in processes:
        process.start()
    answers = sorted(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    won = [answer for answer in answers if answer.startswith("won")]
    assert len(won) == 1 and answers.count("refused 409") == RACERS - 1, answers
    with env.database.read() as connection:
        row = connection.execute(
            text("SELECT status, operation, operation_idempotency_key FROM payments WHERE id = :p"), {"p": payment_id}
        ).one()
        events = connection.execute(
            text(
                "SELECT count(*) FROM events WHERE object_id = :p"
                " AND (from_state, to_state) = ('requires_capture', 'processing')"
            ),
            {"p": payment_id},
        ).scalar()
    assert (row.status, f"won {row.operation}") == ("processing", won[0]) and events == 1
