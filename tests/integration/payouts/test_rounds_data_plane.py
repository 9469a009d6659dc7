"""The payout's worker rounds on the data plane (ADR 0026 step 3): a send or a status query the
bank answers `accepted` (to `sent`) or `rejected` (to `failed`) for a payout still `processing`
or `in_doubt` is written by the payout's settle phase (`payouts/settle.py`, `in_doubt/plane.py`:
one call of `paycore_payouts_settle` on PostgreSQL, `settle_repository.write_move`'s fixed list
on SQLite), counted (never timed) on each database; the rows are those the reference path
(`lifecycle.apply_evidence`) writes for the same answer; any other answer is still the
reference path's.

Counted as tests/integration/refunds/test_rounds_data_plane.py counts, around one round of one
payout. `PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints them.
"""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.kit import actors
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.payouts import money, rounds, settle, states
from paycore.payouts import service as payouts
from paycore.processor.port import PayoutRequest, PayoutResult, Processor, ProcessorUnreachable
from tests.support.payouts import funded_source, schedule
from tests.support.rounds import COMMITS, POLICY, by_plane, differences, events, kept, kept_rows, run
from tests.support.statements import counting

AMOUNT_MINOR = 2_500
SEND = actors.worker("send_payouts")
RESOLVE = actors.worker("resolve_payouts")

# One send round of one queued payout the bank answers `accepted`, on the data plane. Both: the
# claim's transaction (the due payouts' two reads, the move to `processing` and its state event)
# and, after the call, the payout's: its read for update and the call's attempt recorded, then
# the settle phase. SQLite: its fixed list, the round's schedule in its compare-and-set (the
# compare-and-set, the hold's resolution, the two accounts' totals, the posted entries, the state
# event), and BEGIN IMMEDIATE for each transaction: 5 + 9. PostgreSQL: the round's schedule (one
# UPDATE) and the phase's one call: 4 + 4.
SEND_STATEMENTS = {"sqlite": 14, "postgresql": 8}
# The same send answered `rejected`: the hold voided, no entries (on PostgreSQL inside the call).
SEND_REJECTED_STATEMENTS = {"sqlite": 13, "postgresql": 8}
# An ask round of an `in_doubt` payout the bank says `accepted`: the claim (two reads and its
# UPDATE, no move) and the same apply.
RESOLVE_STATEMENTS = {"sqlite": 13, "postgresql": 7}
# The reference path, the same rounds (the settle phase off; main before it, counted the same
# way): the payout's transaction is its read, the attempt, the compare-and-set through
# SQLAlchemy, the hold's read, its resolution, the two accounts' totals, the entries (none for a
# rejection) and the state event.
REFERENCE_SEND_STATEMENTS = {"sqlite": 15, "postgresql": 13}
REFERENCE_SEND_REJECTED_STATEMENTS = {"sqlite": 14, "postgresql": 12}
REFERENCE_RESOLVE_STATEMENTS = {"sqlite": 14, "postgresql": 12}


class _Bank:
    """The bank answers a send and a status query `answer` (`lost`: no answer)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        return self.get_payout(request.request_id)

    def get_payout(self, request_id: str) -> PayoutResult:
        if self.answer == "lost":
            raise ProcessorUnreachable("the answer was lost")
        failure = "R01" if self.answer == "rejected" else None
        status = cast(Any, self.answer)
        return PayoutResult(
            request_id, status, f"bk_{request_id}", AMOUNT_MINOR, "USD", "ach", batch_id="b1", failure_code=failure
        )


def bank(answer: str = "accepted") -> Processor:
    return cast(Processor, _Bank(answer))


def queued_payout(database: Database, tenant_id: str) -> tuple[str, str]:
    """(its source account, a queued payout of it, due at once)."""
    source = funded_source(database, tenant_id, 10_000)
    payout = schedule(database, tenant_id, source, AMOUNT_MINOR)
    assert rounds.queue_due(database, batch_max=10, actor=actors.worker("queue_payouts")) == 1
    return source, payout.id


def in_doubt_payout(database: Database, tenant_id: str) -> tuple[str, str]:
    """A payout sent, the bank's answer lost: `in_doubt`, due at once."""
    made = queued_payout(database, tenant_id)
    assert rounds.send_due(database, bank("lost"), POLICY, "sender", actor=SEND) == 1
    assert status(database, tenant_id, made[1]) == "in_doubt"
    time.sleep(0.005)  # the first ask is due within 2 ms
    return made


def status(database: Database, tenant_id: str, payout_id: str) -> str:
    with database.read() as connection:
        return payouts.MACHINE.load(connection, tenant_id, payout_id).status


def parked(database: Database, tenant_id: str) -> None:
    """The tenant's payouts taken off the rounds (a `sent` payout is asked about again, due within
    2 ms): the next round of the test claims only the payout it is about."""
    database.transaction(
        lambda connection: connection.execute(
            text("UPDATE payouts SET next_attempt_at_us = NULL WHERE tenant_id = :t"), {"t": tenant_id}
        )
    )


_STATUS = {"accepted": "sent", "rejected": "failed"}


def _send(database: Database, tenant_id: str, answer: str) -> list[str]:
    _, payout_id = queued_payout(database, tenant_id)
    with counting(database) as statements:
        assert rounds.send_due(database, bank(answer), POLICY, "w", actor=SEND) == 1
    assert status(database, tenant_id, payout_id) == _STATUS[answer]
    parked(database, tenant_id)
    return statements


def _resolve(database: Database, tenant_id: str) -> list[str]:
    _, payout_id = in_doubt_payout(database, tenant_id)
    with counting(database) as statements:
        assert rounds.resolve_due(database, bank(), POLICY, "w", actor=RESOLVE) == 1
    assert status(database, tenant_id, payout_id) == "sent"
    parked(database, tenant_id)
    return statements


@pytest.mark.parametrize(
    ("answer", "expected"), [("accepted", SEND_STATEMENTS), ("rejected", SEND_REJECTED_STATEMENTS)]
)
def test_a_send_round_settles_by_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    database: Database, answer: str, expected: dict[str, int]
) -> None:
    statements = _send(database, f"send-{answer}", answer)
    dialect = database.engine.dialect.name
    assert (len(run(statements)), statements.count("COMMIT")) == (expected[dialect], COMMITS), run(statements)
    settles = [sql for sql in statements if sql.startswith("SELECT paycore_payouts_settle(")]
    assert len(settles) == (1 if dialect == "postgresql" else 0), statements
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def test_an_ask_round_settles_by_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database) -> None:
    statements = _resolve(database, "resolve")
    dialect = database.engine.dialect.name
    assert (len(run(statements)), statements.count("COMMIT")) == (RESOLVE_STATEMENTS[dialect], COMMITS), statements
    assert by_plane(statements, "payouts"), statements


def test_the_reference_paths_counts_are_what_the_comments_say(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settle, "ROUND", None)
    dialect = database.engine.dialect.name
    for answer, expected in (("accepted", REFERENCE_SEND_STATEMENTS), ("rejected", REFERENCE_SEND_REJECTED_STATEMENTS)):
        statements = _send(database, f"ref-send-{answer}", answer)
        assert len(run(statements)) == expected[dialect], statements
    assert len(run(_resolve(database, "ref-resolve"))) == REFERENCE_RESOLVE_STATEMENTS[dialect]


def facts(database: Database, tenant_id: str, payout_id: str, source: str) -> dict[str, Any]:
    """What the rounds wrote for the payout, ids, references and times left out: its row, its
    events, the hold's transfers and entries, the source's and the in-transit account's balances."""
    params = {"t": tenant_id, "p": payout_id}
    with database.read() as connection:
        row = connection.execute(text("SELECT * FROM payouts WHERE tenant_id = :t AND id = :p"), params).one()
        found = kept_rows(connection, tenant_id, str(row._mapping["transfer_id"]))
        in_transit = ledger.find_account_by_code(connection, tenant_id, _in_transit())
        assert in_transit is not None
        balances = [ledger.get_account(connection, tenant_id, source).balance, in_transit.balance]
        assert ledger.verify(connection).problems == []
        history = events(connection, tenant_id, payout_id)
    return {
        "payout": kept(dict(row._mapping)),
        "events": history,
        **found,
        "balances": [(b.posted_minor, b.pending_minor, b.available_minor) for b in balances],
    }


def _in_transit() -> str:
    return chart.code(money.IN_TRANSIT, "USD")


@pytest.mark.parametrize("answer", ["accepted", "rejected"])
def test_a_send_rounds_rows_are_the_reference_paths(
    database: Database, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    written = {}
    for tenant_id, plane in ((f"plane-{answer}", settle.ROUND), (f"reference-{answer}", None)):
        monkeypatch.setattr(settle, "ROUND", plane)
        source, payout_id = queued_payout(database, tenant_id)
        with counting(database) as statements:
            assert rounds.send_due(database, bank(answer), POLICY, "w", actor=SEND) == 1
        assert by_plane(statements, "payouts") == (plane is not None), statements
        written[tenant_id] = facts(database, tenant_id, payout_id, source)
        parked(database, tenant_id)
    mine, theirs = written[f"plane-{answer}"], written[f"reference-{answer}"]
    assert mine == theirs, differences(mine, theirs)
    assert mine["payout"]["status"] == _STATUS[answer] and mine["payout"]["attempts"] == 1


def test_an_ask_rounds_rows_are_the_reference_paths(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    written = {}
    for tenant_id, plane in (("plane-ask", settle.ROUND), ("reference-ask", None)):
        source, payout_id = in_doubt_payout(database, tenant_id)
        monkeypatch.setattr(settle, "ROUND", plane)
        assert rounds.resolve_due(database, bank(), POLICY, "w", actor=RESOLVE) == 1
        monkeypatch.undo()
        written[tenant_id] = facts(database, tenant_id, payout_id, source)
        parked(database, tenant_id)
    mine, theirs = written["plane-ask"], written["reference-ask"]
    assert mine == theirs, differences(mine, theirs)
    assert mine["payout"]["attempts"] == 2


@pytest.mark.parametrize("answer", ["settled", "lost"])
def test_an_answer_the_phase_does_not_take_is_the_reference_paths(database: Database, answer: str) -> None:
    """`settled` moves two steps (and books the bank's fee), no answer makes the payout
    `in_doubt`: neither is the settle phase's, which writes nothing for them."""
    _, payout_id = queued_payout(database, f"unplain-{answer}")
    with counting(database) as statements:
        assert rounds.send_due(database, bank(answer), POLICY, "w", actor=SEND) == 1
    assert not by_plane(statements, "payouts"), statements
    assert status(database, f"unplain-{answer}", payout_id) == (states.SETTLED if answer == "settled" else "in_doubt")
