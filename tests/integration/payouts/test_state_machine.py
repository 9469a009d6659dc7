"""The payout state machine (SPEC §11): every transition allowed and every one refused, in
code and by the database; cancel from each state; the ledger at each step."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.ledger.errors import InsufficientFunds
from paycore.lifecycle.evidence import Applied
from paycore.payouts import lifecycle, service, states
from paycore.payouts.errors import PayoutNotCancelable
from paycore.payouts.types import Payout
from tests.support.payouts import PATH_TO, balance, books_ok, funded_source, load, move, schedule

TENANT = "payouts"


def test_the_table_is_what_the_spec_draws() -> None:
    expected = {
        ("scheduled", "queued"),
        ("scheduled", "canceled"),
        ("queued", "processing"),
        ("queued", "canceled"),
        ("processing", "sent"),
        ("processing", "failed"),
        ("processing", "in_doubt"),
        ("in_doubt", "sent"),
        ("in_doubt", "failed"),
        ("sent", "settled"),
        ("sent", "failed"),
        ("settled", "returned"),
    }
    assert {(states.public(a), states.public(b)) for a, b in states.TRANSITIONS} == expected
    for terminal in states.TERMINAL:
        assert not any(a == terminal for a, _ in states.TRANSITIONS)


@pytest.mark.parametrize(("from_state", "to_state"), list(itertools.product(states.STATUSES, repeat=2)))
def test_every_transition_is_allowed_or_refused_by_the_table(
    database: Database, from_state: str, to_state: str
) -> None:
    source = funded_source(database, TENANT, 10_000)
    payout = move(database, schedule(database, TENANT, source, 1_000), *PATH_TO[from_state])
    assert payout.status == from_state

    def attempt(connection: object) -> Applied[Payout]:
        current = service.MACHINE.load(connection, TENANT, payout.id, for_update=True)  # type: ignore[arg-type]
        return lifecycle.MACHINE.move(connection, current, to_state, cause="test", actor="local", now_us=now_us())  # type: ignore[arg-type]

    moved = database.transaction(attempt)
    allowed = (from_state, to_state) in states.TRANSITIONS
    assert moved.changed is allowed
    assert load(database, payout).status == (to_state if allowed else from_state)
    assert books_ok(database)


def test_the_database_refuses_a_status_the_table_does_not_know(database: Database) -> None:
    source = funded_source(database, TENANT, 10_000)
    payout = schedule(database, TENANT, source, 1_000)
    with pytest.raises(IntegrityError), database.engine.connect() as connection, connection.begin():
        connection.execute(text("UPDATE payouts SET status = 'paid' WHERE id = :id"), {"id": payout.id})
    assert load(database, payout).status == states.SCHEDULED


def test_scheduling_holds_the_amount_and_refuses_what_the_source_does_not_have(database: Database) -> None:
    source = funded_source(database, TENANT, 1_500)
    schedule(database, TENANT, source, 1_000)
    assert balance(database, TENANT, source) == (1_500, -1_000, 500)
    with pytest.raises(InsufficientFunds):
        schedule(database, TENANT, source, 501)
    assert balance(database, TENANT, source) == (1_500, -1_000, 500)


@pytest.mark.parametrize("state", states.STATUSES)
def test_cancel_from_each_state(database: Database, state: str) -> None:
    source = funded_source(database, TENANT, 5_000)
    payout = move(database, schedule(database, TENANT, source, 2_000), *PATH_TO[state])

    def cancel(connection: object) -> object:
        return service.cancel(connection, TENANT, payout.id, actor="local", now_us=now_us())  # type: ignore[arg-type]

    if state in (states.SCHEDULED, states.QUEUED, states.CANCELED):
        assert database.transaction(cancel).status == states.CANCELED  # type: ignore[attr-defined]
        assert database.transaction(cancel).status == states.CANCELED  # type: ignore[attr-defined]  # twice
        assert balance(database, TENANT, source) == (5_000, 0, 5_000)  # the hold is voided
    else:
        with pytest.raises(PayoutNotCancelable) as refused:
            database.transaction(cancel)
        assert refused.value.details["status"] == states.public(state)
        assert load(database, payout).status == state
    assert books_ok(database)


@pytest.mark.parametrize(
    ("state", "source_posted", "source_pending"),
    [
        (states.SCHEDULED, 5_000, -2_000),
        (states.PROCESSING, 5_000, -2_000),
        (states.IN_DOUBT, 5_000, -2_000),  # never released by a guess
        (states.SENT, 3_000, 0),
        (states.SETTLED, 3_000, 0),
        (states.FAILED, 5_000, 0),
        (states.CANCELED, 5_000, 0),
    ],
)
def test_the_ledger_agrees_with_each_state(
    database: Database, state: str, source_posted: int, source_pending: int
) -> None:
    source = funded_source(database, TENANT, 5_000)
    move(database, schedule(database, TENANT, source, 2_000), *PATH_TO[state])
    posted, pending, _ = balance(database, TENANT, source)
    assert (posted, pending) == (source_posted, source_pending)
    assert books_ok(database)


def test_rejected_after_sent_gives_the_money_back(database: Database) -> None:
    source = funded_source(database, TENANT, 5_000)
    move(database, schedule(database, TENANT, source, 2_000), *PATH_TO[states.SENT], states.FAILED)
    assert balance(database, TENANT, source) == (5_000, 0, 5_000)
    assert books_ok(database)
