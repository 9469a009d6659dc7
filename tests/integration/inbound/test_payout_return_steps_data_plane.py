"""The bank's `returned` words that still took the reference path, on the data plane (ADR 0026
step 3, issue 39), on both databases: a return past its window (the refusal's note), and a
return for a payout not settled yet (`sent`: settled, then returned; `in_doubt`: sent, settled,
returned), short with a return fee and the bank's fee, or whole without fees.

- What each costs in SQL, counted (never timed) around `receive.receive`: the payout's read and
  one call on PostgreSQL (no client commit); BEGIN IMMEDIATE, the read and the fixed list on
  SQLite, one commit (`APPLY_COST`; the reference path's, `service.receive` alone, counted the
  same way: `REFERENCE_COST`).
- That each writes what the reference path (`inbound.service.receive`) writes for the same event
  and payout, row for row (the payout, its transfers and entries, the events with their sequence
  and snapshot, the adjustments, the stored event, the accounts' totals), and answers the same
  (and a redelivery the same).
- That a payout moved between the read and the call, and a schema without the function, are
  still the reference path's.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from paycore.inbound import apply_object_repository, apply_payout_return, receive, service
from paycore.inbound.apply_object_plan import Confirmation
from paycore.inbound.service import Received
from paycore.invariants import service as invariants
from paycore.ledger import service as ledger
from tests.integration.inbound.test_apply_payout_data_plane import AMOUNT_MINOR, dialect, event_for, in_doubt
from tests.integration.inbound.test_payout_return_data_plane import (
    RETURN_FEE_MINOR,
    SHORT_MINOR,
    _late,
    returned_event,
    roles,
)
from tests.integration.inbound.test_payout_settlement_data_plane import FEE_MINOR, normal, rows_of, sent, totals_of
from tests.integration.inbound.test_receive_data_plane import references, signed
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support
from tests.support import payout_webhooks
from tests.support.statements import counting

__all__ = ["references"]  # the fixture, shared with the payments' tests

# (statements, commits) of `receive.receive`, by database and case.
APPLY_COST = {
    # BEGIN IMMEDIATE, the read, the stored event, the note, the webhook's audit event
    ("sqlite", "late"): (5, 1),
    ("postgresql", "late"): (2, 0),
    # BEGIN IMMEDIATE, the read, the settlement's list (with the bank's fee: 12, 8 without; from
    # `in_doubt` the settle's list to `sent` before it, 6) and the return's after its stored event
    # (12 with a short return and its fee, 9 for a whole one without)
    ("sqlite", "from sent"): (25, 1),
    ("sqlite", "whole from sent"): (18, 1),
    ("sqlite", "from in_doubt"): (31, 1),
    ("postgresql", "from sent"): (2, 0),
    ("postgresql", "whole from sent"): (2, 0),
    ("postgresql", "from in_doubt"): (2, 0),
}
REFERENCE_COST = {  # the reference path's, `service.receive` alone, for the same events
    ("sqlite", "late"): (7, 1),
    ("postgresql", "late"): (6, 1),
    ("sqlite", "from sent"): (43, 1),
    ("sqlite", "whole from sent"): (24, 1),
    ("sqlite", "from in_doubt"): (51, 1),
    ("postgresql", "from sent"): (42, 1),
    ("postgresql", "whole from sent"): (23, 1),
    ("postgresql", "from in_doubt"): (50, 1),
}
FUNCTIONS = {
    "late": "refuse_payout_return",
    "from sent": "return_sent_payout",
    "whole from sent": "return_sent_payout",
    "from in_doubt": "return_waiting_payout",
}
RESULTS = {"late": "stale", "from sent": "applied", "whole from sent": "applied", "from in_doubt": "applied"}


def _late_payout(env: Env) -> tuple[str, bytes]:
    payout_id = _late(env)
    return payout_id, event_for(payout_id, "returned", return_code="R01")


def _unsettled(start: Callable[[Env], tuple[str, str]], case: str) -> Callable[[Env], tuple[str, bytes]]:
    """A payout not settled yet and the bank's `returned` for it: short, with the return's fee
    and the bank's fee (`returned`), or whole without fees (`returned whole`)."""

    def started(env: Env) -> tuple[str, bytes]:
        _, payout_id = start(env)
        if case == "returned whole":
            return payout_id, returned_event(payout_id, case)
        short = {"return_amount_minor": AMOUNT_MINOR - SHORT_MINOR, "return_fee_minor": RETURN_FEE_MINOR}
        return payout_id, event_for(payout_id, "returned", return_code="R01", fee_minor=FEE_MINOR, **short)

    return started


STARTS: dict[str, Callable[[Env], tuple[str, bytes]]] = {
    "late": _late_payout,
    "from sent": _unsettled(sent, "returned"),
    "whole from sent": _unsettled(sent, "returned whole"),
    "from in_doubt": _unsettled(in_doubt, "returned"),
}


def _source_of(env: Env, payout_id: str) -> str:
    with env.database.read() as connection:
        found = connection.execute(
            text("SELECT source_account_id FROM payouts WHERE tenant_id = :t AND id = :p"),
            {"t": support.TENANT, "p": payout_id},
        ).scalar_one()
    return str(found)


class Delivered:
    """A payout's `returned` webhook delivered twice: its rows, what it added to the accounts'
    totals, and what each delivery answered."""

    def __init__(self, env: Env, case: str, deliver: Callable[..., Received]) -> None:
        payout_id, body = STARTS[case](env)
        named = roles(env.database, _source_of(env, payout_id))
        before = totals_of(env.database, named)
        self.results = [deliver(env.database, *signed(env, body)).result for _ in range(2)]
        after = totals_of(env.database, named)
        self.totals = {role: {name: after[role][name] - before[role][name] for name in after[role]} for role in after}
        self.rows = normal(rows_of(env.database, payout_id), named)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", list(STARTS))
def test_the_webhook_is_a_read_and_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    env: Env, case: str, references: list[str]
) -> None:
    _, body = STARTS[case](env)
    references.clear()
    with counting(env.database) as statements:
        received = receive.receive(env.database, *signed(env, body))
    assert received == Received(json.loads(body)["id"], RESULTS[case]) and references == [], statements
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == APPLY_COST[(dialect(env), case)], statements
    if dialect(env) == "postgresql":
        assert run[1].startswith(f"SELECT paycore_inbound_{FUNCTIONS[case]}("), run
    else:
        assert run[0] == "BEGIN IMMEDIATE" and run[2].startswith("INSERT INTO processor_webhooks"), run


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", list(STARTS))
def test_the_reference_path_costs_what_the_docstring_says(env: Env, case: str) -> None:
    _, body = STARTS[case](env)
    with counting(env.database) as statements:
        assert service.receive(env.database, *signed(env, body)).result == RESULTS[case]
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == REFERENCE_COST[(dialect(env), case)], statements


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", list(STARTS))
def test_the_data_plane_writes_what_the_reference_path_writes(env: Env, case: str, references: list[str]) -> None:
    fast = Delivered(env, case, receive.receive)
    # A late return's redelivery is its plain case's too; a returned payout's, the reference path's.
    assert references == ([] if case == "late" else ["duplicate"]), references
    reference = Delivered(env, case, service.receive)

    assert fast.results == reference.results == [RESULTS[case], "duplicate"]
    assert fast.rows == reference.rows
    assert fast.totals == reference.totals
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []
    events = fast.rows["events"]
    changes = [(row["from_state"], row["to_state"]) for row in events if row["kind"] == "state_change"]
    if case != "late":
        first = ["in_doubt", "sent"] if case == "from in_doubt" else ["sent"]
        assert changes[-len(first) - 1 :] == [
            *zip(first, [*first[1:], "settled"], strict=True),
            ("settled", "returned"),
        ]
        assert fast.rows["payout"]["status"] == "returned"
        assert fast.totals["SOURCE"]["credits_posted_minor"] == AMOUNT_MINOR, "the source gets the whole amount back"
        kinds = sorted(row["kind"] for row in fast.rows["adjustments"])
        assert kinds == (["return"] if case == "whole from sent" else ["fee", "return", "return_fee"])
    if case == "late":
        assert (
            fast.rows["payout"]["status"] == "succeeded" and fast.rows["adjustments"] == reference.rows["adjustments"]
        )
        notes = [(row["type"], row["cause"]) for row in events if row["kind"] == "note"]
        assert notes == [("payout.return_refused", "return_window_closed")]
        assert [row["cause"] for row in events if row["kind"] == "webhook"][-1] == "late"
        assert sorted(row["status"] for row in fast.rows["webhooks"]) == ["applied", "stale"]


# ------------------------------------------------------------------ everything else: the reference path


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_late_return_of_another_amount_is_the_reference_paths(env: Env, references: list[str]) -> None:
    payout_id = _late(env)
    references.clear()
    body = event_for(payout_id, "returned", return_code="R01", amount_minor=1)
    assert receive.receive(env.database, *signed(env, body)).result == "mismatch"
    assert references == ["mismatch"]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_payout_returned_between_the_read_and_the_call_is_refused_by_the_function(env: Env) -> None:
    """PostgreSQL: the refusal planned from the payout as read (`settled`), which another webhook
    returned before the call: the function refuses it (PC013), nothing written, so the caller
    takes the reference path (`apply_object._DECIDED_BY_REFERENCE`). SQLite reads and writes
    under one BEGIN IMMEDIATE: nothing moves it in between."""
    if not env.database.is_postgres:
        pytest.skip("SQLite reads the payout in the write's own transaction")
    payout_id, body = _late_payout(env)
    event = service.verified_event(*signed(env, body))
    with env.database.read() as connection:
        plan = apply_payout_return.RETURN.plan_of(connection, event, body)
    assert isinstance(plan, Confirmation) and [note["type"] for note in plan.notes] == ["payout.return_refused"]
    moved = text("UPDATE payouts SET status = 'returned' WHERE tenant_id = :t AND id = :p")
    env.database.transaction(lambda connection: connection.execute(moved, {"t": support.TENANT, "p": payout_id}))
    with env.database.autocommit() as connection, pytest.raises(DBAPIError) as raised:
        apply_object_repository.confirm_call(connection, apply_payout_return.RETURN.writing, plan)
    assert getattr(raised.value.orig, "sqlstate", None) == "PC013"
    with env.database.read() as connection:
        stored = text("SELECT count(*) FROM processor_webhooks WHERE tenant_id = :t AND event_id = :e")
        assert connection.execute(stored, {"t": support.TENANT, "e": event.id}).scalar_one() == 0


DROPPED = {  # each case's function, by its migration's names
    "late": ("_REFUSE_PAYOUT_RETURN", "_CREATE_REFUSE_PAYOUT_RETURN"),
    "from sent": ("_RETURN_SENT_PAYOUT", "_CREATE_RETURN_SENT_PAYOUT"),
    "from in_doubt": ("_RETURN_WAITING_PAYOUT", "_CREATE_RETURN_WAITING_PAYOUT"),
}


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", list(DROPPED))
def test_a_schema_without_the_function_is_the_reference_paths(env: Env, case: str, references: list[str]) -> None:
    """A PostgreSQL database one revision behind: the call fails with 42883 having written
    nothing, and the reference path decides as before. The function is put back."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    migration = payout_webhooks.migration("inbound_payout_return_steps")
    signature, create = (getattr(migration, name) for name in DROPPED[case])
    payout_id, body = STARTS[case](env)
    references.clear()
    with payout_webhooks.function_dropped(env.database, signature, create):
        received = receive.receive(env.database, *signed(env, body))
    assert received.result == RESULTS[case] and references == [RESULTS[case]]
    assert support.get(env, payout_id)["status"] == ("settled" if case == "late" else "returned")


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", ["from sent", "from in_doubt"])
def test_the_route_returns_it_on_the_data_plane(env: Env, case: str, references: list[str]) -> None:
    """`POST /v1/webhooks/processor` (its thin edge: on SQLite the write joins the group commit
    from the event loop, on PostgreSQL the whole receive runs on one worker thread)."""
    payout_id, body = STARTS[case](env)
    references.clear()
    response = payout_webhooks.post_webhook(env.client, env.settings.processor_webhook_secret, body)
    assert response.status_code == 200 and response.json()["result"] == "applied", response.text
    assert references == [], "the data plane moved it"
    assert support.get(env, payout_id)["status"] == "returned"
