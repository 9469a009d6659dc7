"""The bank's webhooks that still took the reference path, on the data plane (ADR 0026 step 3,
issue 39), on both databases: a `returned` word for a settled payout, and a `settled` word for a
payout still in doubt (two steps).

- What each costs in SQL, counted (never timed) around `receive.receive`: the payout's read and
  one call on PostgreSQL (no client commit); BEGIN IMMEDIATE, the read and the fixed list on
  SQLite, one commit (`APPLY_COST`; the reference path's, `service.receive` alone, counted the
  same way: `REFERENCE_COST`).
- That each writes what the reference path (`inbound.service.receive`) writes for the same event
  and payout, row for row (the payout, its transfers and entries, the events with their sequence
  and snapshot, the adjustments, the stored event, the accounts' totals), and answers the same
  (and a redelivery the same): a return of the whole amount and one short of it, with and
  without a return fee; a settlement from `in_doubt` with and without the bank's fee.
- That everything else is still the reference path's: another amount, no rail, and a schema
  without the functions (a return past its window and a return for a payout not settled yet are
  `test_payout_return_steps_data_plane.py`'s).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.inbound import receive, service
from paycore.inbound.service import Received
from paycore.invariants import service as invariants
from paycore.ledger import service as ledger
from tests.integration.inbound.test_apply_payout_data_plane import AMOUNT_MINOR, dialect, event_for, in_doubt
from tests.integration.inbound.test_payout_settlement_data_plane import FEE_MINOR, normal, rows_of, sent, totals_of
from tests.integration.inbound.test_receive_data_plane import references, signed
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support
from tests.support import payout_webhooks
from tests.support.statements import counting

__all__ = ["references"]  # the fixture, shared with the payments' tests

DAY_US = 86_400_000_000
RETURN_FEE_MINOR = 150
SHORT_MINOR = 40  # what the beneficiary's bank kept of a short return
# (statements, commits) of `receive.receive`, by database and case.
APPLY_COST = {
    # the stored event, the compare-and-set, the state event, the transfers (one INSERT), each
    # entry's account (5: the bank's cash twice, the losses, the source, the fees; 2 for a whole
    # return without a fee), the entries, the adjustments, their audit events, the webhook's audit event
    ("sqlite", "returned"): (15, 1),
    ("sqlite", "returned whole"): (12, 1),
    # the settle's list to `sent` (the compare-and-set, the resolution, two accounts, the entries,
    # the state event) and the settlement's (the fee's included: 12), after the read
    ("sqlite", "settled from in_doubt"): (20, 1),
    ("postgresql", "returned"): (2, 0),
    ("postgresql", "returned whole"): (2, 0),
    ("postgresql", "settled from in_doubt"): (2, 0),
}
REFERENCE_COST = {  # the reference path's, `service.receive` alone, for the same events
    ("sqlite", "returned"): (26, 1),
    ("sqlite", "returned whole"): (16, 1),
    ("sqlite", "settled from in_doubt"): (30, 1),
    ("postgresql", "returned"): (26, 1),
    ("postgresql", "returned whole"): (16, 1),
    ("postgresql", "settled from in_doubt"): (29, 1),
}
ROLES = {
    "payouts.in_transit.USD": "IN_TRANSIT",
    "bank.cash.USD": "BANK_CASH",
    "payouts.fees.USD": "FEES",
    "payouts.losses.USD": "LOSSES",
}


def settled(env: Env) -> tuple[str, str]:
    """(source account, payout id): a payout the bank's webhooks sent and settled."""
    source, payout_id = sent(env)
    body = event_for(payout_id, "settled", fee_minor=FEE_MINOR)
    assert receive.receive(env.database, *signed(env, body)).result == "applied"
    return source, payout_id


def returned_event(payout_id: str, case: str) -> bytes:
    """The bank's `returned`: of the whole amount (`returned whole`), or short, with a fee."""
    if case == "returned whole":
        return event_for(payout_id, "returned", return_code="R01")
    short = {"return_amount_minor": AMOUNT_MINOR - SHORT_MINOR, "return_fee_minor": RETURN_FEE_MINOR}
    return event_for(payout_id, "returned", return_code="R01", **short)


def waiting_event(payout_id: str, fee_minor: int = FEE_MINOR) -> bytes:
    return event_for(payout_id, "settled", fee_minor=fee_minor)


def prepared(env: Env, case: str) -> tuple[str, str, bytes]:
    """(source account, payout id, the webhook's body) of each case."""
    if case == "settled from in_doubt":
        source, payout_id = in_doubt(env)
        return source, payout_id, waiting_event(payout_id)
    source, payout_id = settled(env)
    return source, payout_id, returned_event(payout_id, case)


def roles(database: Database, source: str) -> dict[str, str]:
    """Each account's role by its id: the payout's source and the payout system accounts."""
    with database.read() as connection:
        rows = connection.execute(
            text("SELECT id, code FROM ledger_accounts WHERE tenant_id = :t"), {"t": support.TENANT}
        ).all()
    return {account_id: ROLES[code] for account_id, code in rows if code in ROLES} | {source: "SOURCE"}


class Delivered:
    """A payout moved by the bank's webhook: its rows, what the webhook added to the accounts'
    totals, and what each delivery answered."""

    def __init__(self, env: Env, case: str, deliver: Callable[..., Received], **data: Any) -> None:
        source, payout_id, body = prepared(env, case)
        if data:
            body = waiting_event(payout_id, **data)
        named = roles(env.database, source)
        before = totals_of(env.database, named)
        self.results = [deliver(env.database, *signed(env, body)).result for _ in range(2)]
        after = totals_of(env.database, named)
        self.totals = {role: {name: after[role][name] - before[role][name] for name in after[role]} for role in after}
        self.rows = normal(rows_of(env.database, payout_id), named)


CASES = ["returned", "returned whole", "settled from in_doubt"]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", CASES)
def test_the_webhook_is_a_read_and_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    env: Env, case: str, references: list[str]
) -> None:
    _, payout_id, body = prepared(env, case)
    references.clear()
    with counting(env.database) as statements:
        received = receive.receive(env.database, *signed(env, body))
    assert received == Received(json.loads(body)["id"], "applied") and references == [], statements
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == APPLY_COST[(dialect(env), case)], statements
    if dialect(env) == "postgresql":
        function = "settle_waiting_payout" if case == "settled from in_doubt" else "return_payout"
        assert run[1].startswith(f"SELECT paycore_inbound_{function}("), run
    else:
        assert run[0] == "BEGIN IMMEDIATE" and run[2].startswith("INSERT INTO processor_webhooks"), run
    assert support.get(env, payout_id)["status"] == ("settled" if case == "settled from in_doubt" else "returned")
    assert receive.receive(env.database, *signed(env, body)).result == "duplicate"
    assert references == ["duplicate"], "a redelivery finds the payout moved: the reference path's"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", CASES)
def test_the_reference_path_costs_what_the_docstring_says(env: Env, case: str) -> None:
    _, _, body = prepared(env, case)
    with counting(env.database) as statements:
        assert service.receive(env.database, *signed(env, body)).result == "applied"
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == REFERENCE_COST[(dialect(env), case)], statements


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize(
    ("case", "data"), [(case, {}) for case in CASES] + [("settled from in_doubt", {"fee_minor": 0})]
)
def test_the_data_plane_writes_what_the_reference_path_writes(
    env: Env, case: str, data: dict[str, Any], references: list[str]
) -> None:
    fast = Delivered(env, case, receive.receive, **data)
    assert references == ["duplicate"], "the data plane moved it; its redelivery is the reference path's"
    reference = Delivered(env, case, service.receive, **data)

    assert fast.results == reference.results == ["applied", "duplicate"]
    assert fast.rows == reference.rows
    assert fast.totals == reference.totals
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []
    if case == "settled from in_doubt":
        changes = [(row["from_state"], row["to_state"]) for row in fast.rows["events"] if row["kind"] == "state_change"]
        assert changes[-2:] == [("in_doubt", "sent"), ("sent", "settled")]
        assert fast.totals["SOURCE"]["debits_posted_minor"] == AMOUNT_MINOR
        return
    assert fast.rows["payout"]["status"] == "returned" and fast.rows["payout"]["return_code"] == "R01"
    kinds = [(row["kind"], row["amount_minor"]) for row in fast.rows["adjustments"]]
    if case == "returned":
        expected = [("fee", FEE_MINOR), ("return", AMOUNT_MINOR - SHORT_MINOR), ("return_fee", RETURN_FEE_MINOR)]
        assert sorted(kinds) == expected
        assert fast.totals["LOSSES"]["debits_posted_minor"] == SHORT_MINOR
        assert fast.totals["FEES"]["debits_posted_minor"] == RETURN_FEE_MINOR
    else:
        assert sorted(kinds) == [("fee", FEE_MINOR), ("return", AMOUNT_MINOR)]
        assert fast.totals["LOSSES"]["entries_count"] == 0
    assert fast.totals["SOURCE"]["credits_posted_minor"] == AMOUNT_MINOR, "the source gets the whole amount back"


# ------------------------------------------------------------------ everything else: the reference path


def _late(env: Env) -> str:
    """A settled payout whose return window closed: settled 90 days ago, as far as paycore knows."""
    _, payout_id = settled(env)
    sql = text("UPDATE payouts SET settled_at_us = settled_at_us - :us WHERE tenant_id = :t AND id = :p")
    env.database.transaction(
        lambda connection: connection.execute(sql, {"us": 90 * DAY_US, "t": support.TENANT, "p": payout_id})
    )
    return payout_id


FALLBACKS: list[tuple[str, Callable[[Env], str], dict[str, Any], str]] = [
    # A return past its window is on the data plane now (test_payout_return_steps_data_plane.py).
    # So is a return for a payout not settled yet, in two or three steps.
    ("another amount: a mismatch", lambda env: settled(env)[1], {"amount_minor": AMOUNT_MINOR + 1}, "mismatch"),
    ("no rail", lambda env: settled(env)[1], {"rail": None}, "unmatched"),
]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize(("name", "start", "data", "result"), FALLBACKS, ids=[case[0] for case in FALLBACKS])
def test_every_other_return_is_the_reference_paths(
    env: Env, name: str, start: Callable[[Env], str], data: dict[str, Any], result: str, references: list[str]
) -> None:
    payout_id = start(env)
    references.clear()
    received = receive.receive(env.database, *signed(env, event_for(payout_id, "returned", **data)))
    assert references == [received.result] == [result], name


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", ["returned", "settled from in_doubt"])
def test_a_schema_without_the_function_moves_it_by_the_reference_path(
    env: Env, case: str, references: list[str]
) -> None:
    """A PostgreSQL database one revision behind: the call fails with 42883 having written
    nothing, and the reference path applies the event as before. The function is put back."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    migration = payout_webhooks.migration("inbound_payout_return")
    signature, create = (
        (migration._SETTLE_WAITING_PAYOUT, migration._CREATE_SETTLE_WAITING_PAYOUT)
        if case == "settled from in_doubt"
        else (migration._RETURN_PAYOUT, migration._CREATE_RETURN_PAYOUT)
    )
    _, _, body = prepared(env, case)
    references.clear()
    with payout_webhooks.function_dropped(env.database, signature, create):
        received = receive.receive(env.database, *signed(env, body))
    assert received.result == "applied" and references == ["applied"]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("case", ["returned", "settled from in_doubt"])
def test_the_route_moves_it_on_the_data_plane(env: Env, case: str, references: list[str]) -> None:
    """`POST /v1/webhooks/processor` (its thin edge: on SQLite the write joins the group commit
    from the event loop, on PostgreSQL the whole receive runs on one worker thread)."""
    _, payout_id, body = prepared(env, case)
    references.clear()
    response = payout_webhooks.post_webhook(env.client, env.settings.processor_webhook_secret, body)
    assert response.status_code == 200 and response.json()["result"] == "applied", response.text
    assert references == [], "the data plane moved it"
    assert support.get(env, payout_id)["status"] == ("settled" if case == "settled from in_doubt" else "returned")
