"""The bank's webhook that moves a payout one step, on the data plane (ADR 0026 step 3, issue 39),
on both databases.

- What it costs in SQL, counted (never timed) around `receive.receive`: the payout's read and
  one call on PostgreSQL (no client commit); BEGIN IMMEDIATE, the read and the fixed list on
  SQLite (8 statements for a payout the bank accepted, which posts the hold's entries, 7 for one
  it rejected), one commit.
- That it writes what the reference path (`inbound.service.receive`) writes for the same event
  and payout, row for row (the payout, the hold's resolution and entries, the events with their
  sequence and snapshot, the stored event, the accounts' totals), `accepted` and `rejected`, and
  answers the same (and a redelivery the same).
- That everything else is the reference path's: another amount or rail (a mismatch), a payout
  sent already, an unknown payout, and a schema without the function (a `settled` word is
  `test_payout_return_data_plane.py`'s, a `returned` word `test_payout_return_steps_data_plane.py`'s).

Before (the reference path, `service.receive` alone, counted the same way): `REFERENCE_COST`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.inbound import apply_payout, receive, service
from paycore.inbound.service import Received
from paycore.invariants import service as invariants
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from tests.integration.inbound.test_apply_refund_data_plane import normal
from tests.integration.inbound.test_receive_data_plane import references, signed
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support
from tests.support import payout_webhooks
from tests.support.payouts import funded_source
from tests.support.statements import counting

__all__ = ["references"]  # the fixture, shared with the payments' tests

AMOUNT_MINOR = 2_500
TARGETS = {"accepted": "sent", "rejected": "failed"}
# (statements, commits) of `receive.receive` for a webhook that moves a payout, by database and word.
APPLY_COST = {
    ("sqlite", "accepted"): (10, 1),
    ("sqlite", "rejected"): (9, 1),
    ("postgresql", "accepted"): (2, 0),
    ("postgresql", "rejected"): (2, 0),
}
# ... and for the bank's `accepted` of a payout sent already (the plain case): the read and one
# call; BEGIN IMMEDIATE, the read, the stored event and the audit event.
CONFIRM_COST = {"sqlite": (4, 1), "postgresql": (2, 0)}
REFERENCE_COST = {  # the reference path's, `service.receive` alone, for the same events
    ("sqlite", "accepted"): (13, 1),
    ("sqlite", "rejected"): (12, 1),
    ("postgresql", "accepted"): (12, 1),
    ("postgresql", "rejected"): (11, 1),
}


def in_doubt(env: Env) -> tuple[str, str]:
    """(source account, payout id): a payout sent, the bank's answer lost: `in_doubt`."""
    source = funded_source(env.database, support.TENANT, 10_000)
    payout = support.schedule(env, support.ach(source, AMOUNT_MINOR))
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["payout"]})
    assert support.queue_and_send(env) == 1
    assert support.get(env, payout["id"])["status"] == "in_doubt"
    return source, str(payout["id"])


def event_for(payout_id: str, word: str, **data: Any) -> bytes:
    """The bank's webhook about the payout: `payout.accepted`, `payout.rejected`, ..."""
    fields: dict[str, Any] = {"amount_minor": AMOUNT_MINOR, "batch_id": "batch_1"}
    if word == "rejected":
        fields["failure_code"] = "R03"
    event_id = f"evt_{payout_id}_{word}_{now_us()}"
    return payout_webhooks.event_body(support.TENANT, payout_id, word, event_id=event_id, sequence=2, **fields | data)


def dialect(env: Env) -> str:
    return env.database.engine.dialect.name


_TOTALS = "debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count"


def totals_of(database: Database, source: str) -> dict[str, dict[str, int]]:
    with database.read() as connection:
        found = {}
        for role, where in (("source", "id = :a"), ("in_transit", "code = 'payouts.in_transit.USD'")):
            rows = connection.execute(
                text(f"SELECT {_TOTALS} FROM ledger_accounts WHERE tenant_id = :t AND {where}"),
                {"a": source, "t": support.TENANT},
            )
            found[role] = dict(rows.mappings().one())
    return found


def rows_of(database: Database, payout_id: str) -> dict[str, Any]:
    """Every row the payout wrote or moved, in a fixed order."""
    with database.read() as connection:

        def read(sql: str) -> list[dict[str, Any]]:
            return [
                dict(row) for row in connection.execute(text(sql), {"t": support.TENANT, "p": payout_id}).mappings()
            ]

        [payout] = read("SELECT * FROM payouts WHERE tenant_id = :t AND id = :p")
        owned = "t.tenant_id = :t AND t.owner_id = :p"
        transfers = read(f"SELECT * FROM ledger_transfers t WHERE {owned} ORDER BY kind = 'pending' DESC")
        entries = read(
            "SELECT e.* FROM ledger_entries e JOIN ledger_transfers t ON t.tenant_id = e.tenant_id"
            f" AND t.id = e.transfer_id WHERE {owned} ORDER BY t.kind = 'pending' DESC, e.direction DESC"
        )
        events = read("SELECT * FROM events WHERE tenant_id = :t AND object_id = :p ORDER BY created_at_us, id")
        webhooks = read("SELECT * FROM processor_webhooks WHERE tenant_id = :t AND request_id = :p")
    payout.pop("source_account_id")  # each payout's own source: its role is the source
    return {"payout": payout, "transfers": transfers, "entries": entries, "events": events, "webhooks": webhooks}


class Moved:
    """A payout moved by the bank's webhook: its rows, what the webhook added to its two
    accounts' totals, and what each delivery answered."""

    def __init__(self, env: Env, word: str, deliver: Callable[..., Received]) -> None:
        source, payout_id = in_doubt(env)
        body = event_for(payout_id, word)
        before = totals_of(env.database, source)
        self.results = [deliver(env.database, *signed(env, body)).result for _ in range(2)]
        after = totals_of(env.database, source)
        self.totals = {role: {name: after[role][name] - before[role][name] for name in after[role]} for role in after}
        rows = rows_of(env.database, payout_id)
        for row in rows["entries"]:
            row["account_id"] = "SOURCE" if row["account_id"] == source else "IN_TRANSIT"
        # When the resolver would ask again: a jittered backoff, which a sent payout keeps (the
        # bank's settlement is still to come): whether it is set, not when.
        rows["payout"]["next_attempt_at_us"] = rows["payout"]["next_attempt_at_us"] is not None
        for row in rows["events"]:  # the snapshot names the source account
            row["snapshot"] = row["snapshot"] and row["snapshot"].replace(source, "SOURCE")
        self.rows = normal(rows)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("word", ["accepted", "rejected"])
def test_a_moving_webhook_is_a_read_and_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    env: Env, word: str, references: list[str]
) -> None:
    _, payout_id = in_doubt(env)
    body = event_for(payout_id, word)
    with counting(env.database) as statements:
        received = receive.receive(env.database, *signed(env, body))
    assert received == Received(json.loads(body)["id"], "applied") and references == []
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == APPLY_COST[(dialect(env), word)], statements
    if dialect(env) == "postgresql":
        assert run[1].startswith("SELECT paycore_inbound_apply_payout("), run
    else:
        assert run[0] == "BEGIN IMMEDIATE" and run[2].startswith("INSERT INTO processor_webhooks"), run
    assert support.get(env, payout_id)["status"] == TARGETS[word]
    assert receive.receive(env.database, *signed(env, body)).result == "duplicate"
    assert references == [], "a redelivery, `accepted` or `rejected`, is the plain case's"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("word", ["accepted", "rejected"])
def test_the_reference_path_costs_what_the_docstring_says(env: Env, word: str) -> None:
    _, payout_id = in_doubt(env)
    body = event_for(payout_id, word)
    with counting(env.database) as statements:
        assert service.receive(env.database, *signed(env, body)).result == "applied"
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == REFERENCE_COST[(dialect(env), word)], statements


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("word", ["accepted", "rejected"])
def test_the_data_plane_writes_what_the_reference_path_writes(env: Env, word: str, references: list[str]) -> None:
    fast = Moved(env, word, receive.receive)
    assert references == [], "the data plane moved it and answered its redelivery"
    reference = Moved(env, word, service.receive)

    assert fast.results == reference.results == ["applied", "duplicate"]
    assert fast.rows == reference.rows
    assert fast.totals == reference.totals
    assert fast.rows["payout"]["status"] == TARGETS[word]
    assert [row["kind"] for row in fast.rows["transfers"]] == ["pending", "post" if word == "accepted" else "void"]
    assert [(row["status"], row["attempts"]) for row in fast.rows["webhooks"]] == [("applied", 1)]
    posted = AMOUNT_MINOR if word == "accepted" else 0
    assert fast.totals["source"]["debits_posted_minor"] == posted
    assert fast.totals["source"]["debits_pending_minor"] == -AMOUNT_MINOR
    assert fast.totals["in_transit"]["credits_posted_minor"] == posted
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []


# ------------------------------------------------------------------ the plain case


def sent(env: Env) -> tuple[str, bytes]:
    """A payout the bank's answer moved to `sent`, and its `accepted` webhook."""
    source = funded_source(env.database, support.TENANT, 10_000)
    payout = support.schedule(env, support.ach(source, AMOUNT_MINOR))
    assert support.queue_and_send(env) == 1 and support.get(env, payout["id"])["status"] == "sent"
    return str(payout["id"]), event_for(str(payout["id"]), "accepted")


def failed(env: Env) -> tuple[str, bytes]:
    """A payout the bank's webhook rejected (`failed`), and the bank's `rejected` again: a new
    event of the same word (its redelivery under the same id is the `duplicate` below)."""
    _, payout_id = in_doubt(env)
    assert receive.receive(env.database, *signed(env, event_for(payout_id, "rejected"))).result == "applied"
    assert support.get(env, payout_id)["status"] == "failed"
    return payout_id, event_for(payout_id, "rejected")


# The plain cases: how the payout is made, the audit event's cause the reference path records.
PLAIN: dict[str, tuple[Callable[[Env], tuple[str, bytes]], str]] = {
    "accepted for a payout sent": (sent, "no_change"),
    "rejected for a payout failed": (failed, "stale"),
}


def _plain_rows(env: Env, payout_id: str) -> dict[str, Any]:
    rows = rows_of(env.database, payout_id)
    rows["payout"]["next_attempt_at_us"] = rows["payout"]["next_attempt_at_us"] is not None  # jittered
    for row in rows["entries"]:
        row["account_id"] = "IN_TRANSIT" if row["direction"] == "credit" else "SOURCE"
    for row in rows["events"]:
        row["snapshot"] = row["snapshot"] and json.loads(row["snapshot"]) | {"source_account": "SOURCE"}
    return normal(rows)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", list(PLAIN))
def test_a_confirming_webhook_is_the_read_and_one_call_and_writes_what_the_reference_path_writes(
    env: Env, case: str, references: list[str]
) -> None:
    start, cause = PLAIN[case]
    fast_id, fast_body = start(env)
    reference_id, reference_body = start(env)
    references.clear()
    with counting(env.database) as statements:
        first = receive.receive(env.database, *signed(env, fast_body))
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == CONFIRM_COST[dialect(env)], statements
    if dialect(env) == "postgresql":
        assert run[1].startswith("SELECT paycore_inbound_confirm_payout("), run
    fast = [first.result, receive.receive(env.database, *signed(env, fast_body)).result]
    assert references == [], "the data plane answered both"
    reference = [service.receive(env.database, *signed(env, reference_body)).result for _ in range(2)]
    assert fast == reference == ["stale", "duplicate"]
    fast_rows, reference_rows = _plain_rows(env, fast_id), _plain_rows(env, reference_id)
    assert fast_rows == reference_rows
    assert [row["cause"] for row in fast_rows["events"] if row["kind"] == "webhook"][-1] == cause
    assert [row["status"] for row in fast_rows["webhooks"]][-1:] == ["stale"]


# ------------------------------------------------------------------ everything else: the reference path

FALLBACKS: list[tuple[str, str, dict[str, Any]]] = [
    ("another amount: a mismatch", "accepted", {"amount_minor": AMOUNT_MINOR + 1}),
    ("another rail: a mismatch", "rejected", {"rail": "sepa"}),
    # A `settled` word moves it two steps on the data plane now (test_payout_return_data_plane.py).
    # A `returned` word moves it three steps on the data plane now (test_payout_return_steps_data_plane.py).
    ("an unknown payout", "accepted", {"request_id": "po_unknown"}),
    ("no rail", "accepted", {"rail": None}),
]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize(("name", "word", "data"), FALLBACKS, ids=[case[0] for case in FALLBACKS])
def test_every_other_event_is_the_reference_paths(
    env: Env, name: str, word: str, data: dict[str, Any], references: list[str]
) -> None:
    _, payout_id = in_doubt(env)
    body = event_for(payout_id, word, **data)
    received = receive.receive(env.database, *signed(env, body))
    assert references == [received.result], name


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_rejection_of_another_amount_for_a_payout_failed_is_the_reference_paths(
    env: Env, references: list[str]
) -> None:
    payout_id, _ = failed(env)
    references.clear()
    body = event_for(payout_id, "rejected", amount_minor=AMOUNT_MINOR + 1)
    assert receive.receive(env.database, *signed(env, body)).result == "mismatch"
    assert references == ["mismatch"]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_plan_is_made_for_the_payout_as_read_only(env: Env, references: list[str]) -> None:
    """A payout sent already has no plan: the bank's rejection then is the reference path's
    (the posted hold reversed)."""
    _, payout_id = in_doubt(env)
    assert receive.receive(env.database, *signed(env, event_for(payout_id, "accepted"))).result == "applied"
    rejection = event_for(payout_id, "rejected")
    with env.database.read() as connection:
        event = service.verified_event(*signed(env, rejection))
        assert apply_payout.PAYOUT.plan_of(connection, event, rejection) is None
    assert receive.receive(env.database, *signed(env, rejection)).result == "applied"
    assert references == ["applied"] and support.get(env, payout_id)["status"] == "failed"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_schema_without_the_function_moves_it_by_the_reference_path(env: Env, references: list[str]) -> None:
    """A PostgreSQL database one revision behind: the call fails with 42883 having written
    nothing, and the reference path applies the event as before. The function is put back."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    migration = payout_webhooks.migration("inbound_payouts")
    _, payout_id = in_doubt(env)
    body = event_for(payout_id, "accepted")
    with payout_webhooks.function_dropped(env.database, migration._APPLY_PAYOUT, migration._CREATE_APPLY_PAYOUT):
        received = receive.receive(env.database, *signed(env, body))
    assert received.result == "applied" and references == ["applied"]
    assert support.get(env, payout_id)["status"] == "sent"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_the_route_moves_it_on_the_data_plane(env: Env, references: list[str]) -> None:
    """`POST /v1/webhooks/processor` (its thin edge: on SQLite the write joins the group commit
    from the event loop, on PostgreSQL the whole receive runs on one worker thread)."""
    _, payout_id = in_doubt(env)
    body = event_for(payout_id, "accepted")
    response = payout_webhooks.post_webhook(env.client, env.settings.processor_webhook_secret, body)
    assert response.status_code == 200 and response.json()["result"] == "applied", response.text
    assert references == [], "the data plane moved it"
    assert support.get(env, payout_id)["status"] == "sent"
