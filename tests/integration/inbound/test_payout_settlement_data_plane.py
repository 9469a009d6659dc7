"""The bank's webhook that settles a sent payout, on the data plane (ADR 0026 step 3, issue 39),
on both databases.

- What it costs in SQL, counted (never timed) around `receive.receive`: the payout's read and
  one call on PostgreSQL (no client commit); BEGIN IMMEDIATE, the read and the fixed list on
  SQLite (12 statements with the bank's fee: the stored event, the compare-and-set, the two
  transfers, four accounts' totals by their codes, the four entries, the state event, the
  adjustment and its audit event, the webhook's audit event; 8 without a fee), one commit.
- That it writes what the reference path (`inbound.service.receive`) writes for the same event
  and payout, row for row (the payout, its transfers and entries, the events with their sequence
  and snapshot, the adjustment, the stored event, the accounts' totals), with and without a fee,
  and answers the same (and a redelivery the same).
- That everything else is the reference path's: a payout failed (a contradiction), another
  amount (a mismatch), a payout settled already, and a schema without the function (a payout
  still in doubt moves two steps on the data plane: `test_payout_return_data_plane.py`; a
  `returned` word for a payout sent, `test_payout_return_steps_data_plane.py`).

Before (the reference path, `service.receive` alone, counted the same way): `REFERENCE_COST`.
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
from tests.integration.inbound.test_apply_refund_data_plane import _names
from tests.integration.inbound.test_receive_data_plane import references, signed
from tests.integration.payments.conftest import Env
from tests.integration.payments.test_settle_data_plane import normal_value
from tests.integration.payouts import support
from tests.support import payout_webhooks
from tests.support.payouts import funded_source
from tests.support.statements import counting

__all__ = ["references"]  # the fixture, shared with the payments' tests

FEE_MINOR = 35
# (statements, commits) of `receive.receive` for a `settled` webhook, by database and fee.
APPLY_COST = {
    ("sqlite", FEE_MINOR): (14, 1),
    ("sqlite", 0): (10, 1),
    ("postgresql", FEE_MINOR): (2, 0),
    ("postgresql", 0): (2, 0),
}
REFERENCE_COST = {  # the reference path's, `service.receive` alone, for the same events
    ("sqlite", FEE_MINOR): (22, 1),
    ("sqlite", 0): (13, 1),
    ("postgresql", FEE_MINOR): (21, 1),
    ("postgresql", 0): (12, 1),
}
ROLES = {"payouts.in_transit.USD": "IN_TRANSIT", "bank.cash.USD": "BANK_CASH", "payouts.fees.USD": "FEES"}


def sent(env: Env) -> tuple[str, str]:
    """(source account, payout id): a payout the bank's answer moved to `sent`."""
    source = funded_source(env.database, support.TENANT, 10_000)
    payout = support.schedule(env, support.ach(source, AMOUNT_MINOR))
    assert support.queue_and_send(env) == 1 and support.get(env, payout["id"])["status"] == "sent"
    return source, str(payout["id"])


def settled_event(payout_id: str, fee_minor: int, **data: Any) -> bytes:
    return event_for(payout_id, "settled", fee_minor=fee_minor, **data)


def roles(database: Database, source: str) -> dict[str, str]:
    """Each account's role by its id: the payout's source and the payout system accounts."""
    with database.read() as connection:
        rows = connection.execute(
            text("SELECT id, code FROM ledger_accounts WHERE tenant_id = :t"), {"t": support.TENANT}
        ).all()
    found = {account_id: ROLES[code] for account_id, code in rows if code in ROLES}
    return found | {source: "SOURCE"}


_TOTALS = "id, debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count"


def totals_of(database: Database, named: dict[str, str]) -> dict[str, dict[str, int]]:
    with database.read() as connection:
        rows = connection.execute(
            text(f"SELECT {_TOTALS} FROM ledger_accounts WHERE tenant_id = :t"), {"t": support.TENANT}
        ).mappings()
        return {named[row["id"]]: {k: v for k, v in row.items() if k != "id"} for row in rows if row["id"] in named}


def rows_of(database: Database, payout_id: str) -> dict[str, Any]:
    """Every row the payout wrote or moved, in a fixed order."""
    with database.read() as connection:

        def read(sql: str) -> list[dict[str, Any]]:
            return [
                dict(row) for row in connection.execute(text(sql), {"t": support.TENANT, "p": payout_id}).mappings()
            ]

        [payout] = read("SELECT * FROM payouts WHERE tenant_id = :t AND id = :p")
        owned = "t.tenant_id = :t AND t.owner_id = :p"
        # ids last: transfers made in one call share a time, and a join's row order is the
        # planner's (Citus's differs from PostgreSQL's), so each entry follows its transfer
        order = "t.created_at_us, t.kind = 'pending' DESC, t.reference_type DESC, t.id"
        transfers = read(f"SELECT * FROM ledger_transfers t WHERE {owned} ORDER BY {order}")
        entries = read(
            "SELECT e.* FROM ledger_entries e JOIN ledger_transfers t ON t.tenant_id = e.tenant_id"
            f" AND t.id = e.transfer_id WHERE {owned} ORDER BY {order}, e.direction DESC"
        )
        events = read("SELECT * FROM events WHERE tenant_id = :t AND object_id = :p ORDER BY created_at_us, id")
        adjustments = read("SELECT * FROM payout_adjustments WHERE tenant_id = :t AND payout_id = :p ORDER BY id")
        webhooks = read("SELECT * FROM processor_webhooks WHERE tenant_id = :t AND request_id = :p")
    payout.pop("source_account_id")  # each payout's own source: its role is the source
    return {
        "payout": payout,
        "transfers": transfers,
        "entries": entries,
        "events": events,
        "adjustments": adjustments,
        "webhooks": webhooks,
    }


def normal(rows: dict[str, Any], named: dict[str, str]) -> dict[str, Any]:
    """The rows with each account named by its role, each other id and time by the order it
    first appears in, JSON decoded, and each entry's number counted from the first on its
    account among these rows (the system accounts are shared by both payouts)."""
    for row in rows["entries"]:
        row["account_id"] = named[row["account_id"]]
    rows["payout"]["next_attempt_at_us"] = rows["payout"]["next_attempt_at_us"] is not None  # jittered
    for row in rows["events"]:
        row["snapshot"] = row["snapshot"] and json.loads(row["snapshot"]) | {"source_account": "SOURCE"}
    names: dict[Any, str] = {name: name for name in named.values()}
    _names(rows, names)
    found = {table: normal_value(value, names) for table, value in rows.items()}
    first: dict[str, int] = {}
    for entry in found["entries"]:
        first.setdefault(entry["account_id"], entry["account_sequence"])
        entry["account_sequence"] -= first[entry["account_id"]]
    return found


class Settled:
    """A payout settled by the bank's webhook: its rows, what the webhook added to the accounts'
    totals, and what each delivery answered."""

    def __init__(self, env: Env, fee_minor: int, deliver: Callable[..., Received]) -> None:
        source, payout_id = sent(env)
        named = roles(env.database, source)
        body = settled_event(payout_id, fee_minor)
        before = totals_of(env.database, named)
        self.results = [deliver(env.database, *signed(env, body)).result for _ in range(2)]
        after = totals_of(env.database, named)
        self.totals = {role: {name: after[role][name] - before[role][name] for name in after[role]} for role in after}
        self.rows = normal(rows_of(env.database, payout_id), named)


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("fee_minor", [FEE_MINOR, 0])
def test_a_settling_webhook_is_a_read_and_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    env: Env, fee_minor: int, references: list[str]
) -> None:
    _, payout_id = sent(env)
    body = settled_event(payout_id, fee_minor)
    with counting(env.database) as statements:
        received = receive.receive(env.database, *signed(env, body))
    assert received == Received(json.loads(body)["id"], "applied") and references == []
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == APPLY_COST[(dialect(env), fee_minor)], statements
    if dialect(env) == "postgresql":
        assert run[1].startswith("SELECT paycore_inbound_settle_payout("), run
    else:
        assert run[0] == "BEGIN IMMEDIATE" and run[2].startswith("INSERT INTO processor_webhooks"), run
    assert support.get(env, payout_id)["status"] == "settled"
    assert receive.receive(env.database, *signed(env, body)).result == "duplicate"
    assert references == ["duplicate"], "a redelivery finds the payout settled: the reference path's"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("fee_minor", [FEE_MINOR, 0])
def test_the_reference_path_costs_what_the_docstring_says(env: Env, fee_minor: int) -> None:
    _, payout_id = sent(env)
    body = settled_event(payout_id, fee_minor)
    with counting(env.database) as statements:
        assert service.receive(env.database, *signed(env, body)).result == "applied"
    run = [sql for sql in statements if sql != "COMMIT"]
    assert (len(run), statements.count("COMMIT")) == REFERENCE_COST[(dialect(env), fee_minor)], statements


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("fee_minor", [FEE_MINOR, 0])
def test_the_data_plane_writes_what_the_reference_path_writes(env: Env, fee_minor: int, references: list[str]) -> None:
    fast = Settled(env, fee_minor, receive.receive)
    assert references == ["duplicate"], "the data plane settled it; its redelivery is the reference path's"
    reference = Settled(env, fee_minor, service.receive)

    assert fast.results == reference.results == ["applied", "duplicate"]
    assert fast.rows == reference.rows
    assert fast.totals == reference.totals
    assert fast.rows["payout"]["status"] == "succeeded"
    kinds = [(row["kind"], row["reference_type"]) for row in fast.rows["transfers"]]
    fee_transfer = [("transfer", "adjustment")] if fee_minor else []
    assert kinds == [("pending", "payout"), ("post", "payout"), ("transfer", "payout"), *fee_transfer]
    assert [(row["kind"], row["amount_minor"]) for row in fast.rows["adjustments"]] == (
        [("fee", fee_minor)] if fee_minor else []
    )
    assert [(row["status"], row["attempts"]) for row in fast.rows["webhooks"]] == [("applied", 1)]
    assert fast.totals["IN_TRANSIT"]["debits_posted_minor"] == AMOUNT_MINOR
    assert fast.totals["BANK_CASH"]["credits_posted_minor"] == AMOUNT_MINOR + fee_minor
    assert fast.totals["FEES"]["debits_posted_minor"] == fee_minor
    assert fast.totals["SOURCE"] == dict.fromkeys(fast.totals["SOURCE"], 0), "the source was debited at sent"
    with env.database.read() as connection:
        assert ledger.verify(connection).problems == []
        assert invariants.verify_books(connection) == []


# ------------------------------------------------------------------ everything else: the reference path


def _settled_already(env: Env) -> str:
    _, payout_id = sent(env)
    assert receive.receive(env.database, *signed(env, settled_event(payout_id, 0))).result == "applied"
    return payout_id


def _sent(env: Env) -> str:
    return sent(env)[1]


def _failed(env: Env) -> str:
    """A payout the bank rejected while it was in doubt."""
    payout_id = in_doubt(env)[1]
    assert receive.receive(env.database, *signed(env, event_for(payout_id, "rejected"))).result == "applied"
    return payout_id


FALLBACKS: list[tuple[str, Callable[[Env], str], str, dict[str, Any]]] = [
    # A payout in doubt moves two steps on the data plane now (test_payout_return_data_plane.py).
    ("a payout failed: a contradiction", _failed, "settled", {}),
    # So is a returned word for a payout sent (test_payout_return_steps_data_plane.py).
    ("another amount: a mismatch", _sent, "settled", {"amount_minor": AMOUNT_MINOR + 1}),
    ("a payout settled already", _settled_already, "settled", {}),
    ("no rail", _sent, "settled", {"rail": None}),
]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize(("name", "start", "word", "data"), FALLBACKS, ids=[case[0] for case in FALLBACKS])
def test_every_other_event_is_the_reference_paths(
    env: Env, name: str, start: Callable[[Env], str], word: str, data: dict[str, Any], references: list[str]
) -> None:
    payout_id = start(env)
    references.clear()
    body = event_for(payout_id, word, fee_minor=FEE_MINOR, **data)
    received = receive.receive(env.database, *signed(env, body))
    assert references == [received.result], name


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_a_schema_without_the_function_settles_it_by_the_reference_path(env: Env, references: list[str]) -> None:
    """A PostgreSQL database one revision behind: the call fails with 42883 having written
    nothing, and the reference path applies the event as before. The function is put back."""
    if not env.database.is_postgres:
        pytest.skip("SQLite's list needs no new schema")
    migration = payout_webhooks.migration("inbound_payout_settlement")
    _, payout_id = sent(env)
    body = settled_event(payout_id, FEE_MINOR)
    with payout_webhooks.function_dropped(env.database, migration._SETTLE_PAYOUT, migration._CREATE_SETTLE_PAYOUT):
        received = receive.receive(env.database, *signed(env, body))
    assert received.result == "applied" and references == ["applied"]
    assert support.get(env, payout_id)["status"] == "settled"


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_the_route_settles_it_on_the_data_plane(env: Env, references: list[str]) -> None:
    """`POST /v1/webhooks/processor` (its thin edge: on SQLite the write joins the group commit
    from the event loop, on PostgreSQL the whole receive runs on one worker thread)."""
    _, payout_id = sent(env)
    body = settled_event(payout_id, FEE_MINOR)
    response = payout_webhooks.post_webhook(env.client, env.settings.processor_webhook_secret, body)
    assert response.status_code == 200 and response.json()["result"] == "applied", response.text
    assert references == [], "the data plane settled it"
    assert support.get(env, payout_id)["status"] == "settled"
