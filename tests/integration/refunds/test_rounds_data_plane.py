"""The refund's worker rounds on the data plane (ADR 0026 step 3): a send or a status query the
processor answers `succeeded` or `failed` is written by the refund's settle phase
(`refunds/settle.py`, `in_doubt/plane.py`: one call of `paycore_refunds_settle` on PostgreSQL,
`settle_repository.write_move`'s fixed list on SQLite), counted (never timed) on each database;
the rows are those the reference path (`lifecycle.MACHINE.apply_evidence`) writes for the same
answer; any other answer is still the reference path's.

Counted as tests/integration/payments/test_statement_counts.py counts (every statement the
driver runs, a SQLite group's BEGIN IMMEDIATE included, and every commit), around one round of
one refund. `PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints them.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.processor.port import (
    ChargeRequest,
    ChargeResult,
    Processor,
    ProcessorUnreachable,
    RefundRequest,
    RefundResult,
)
from paycore.refunds import rounds, settle
from paycore.refunds import service as refunds
from tests.support.rounds import (
    COMMITS,
    POLICY,
    by_plane,
    counted,
    created_payment,
    differences,
    events,
    kept,
    kept_rows,
    run,
)
from tests.support.statements import counting

AMOUNT_MINOR = 700
SEND = actors.worker("send_refunds")
RESOLVE = actors.worker("resolve_refunds")

# One round of one refund the processor answers `succeeded`, on the data plane. Both: the claim's
# transaction (the due refunds' claim in two reads and an UPDATE, the payment's read for the
# request, the move to `processing` and its state event) and, after the call, the refund's: its
# read for update and the call's attempt recorded, then the settle phase. SQLite: its fixed list,
# the round's schedule in its compare-and-set (the compare-and-set, the hold's resolution, the
# two accounts' totals, the posted entries, the state event), and BEGIN IMMEDIATE for each
# transaction: 6 + 9. PostgreSQL: the round's schedule (one UPDATE) and the phase's one call:
# 5 + 4.
SEND_STATEMENTS = {"sqlite": 15, "postgresql": 9}
# The same send answered `failed`: the ceiling's release instead of the entries.
SEND_FAILED_STATEMENTS = {"sqlite": 15, "postgresql": 9}
# An ask round of an `in_doubt` refund the processor says `succeeded`: the claim (its two reads
# and UPDATE, the payment's read: no move) and the same apply.
RESOLVE_STATEMENTS = {"sqlite": 14, "postgresql": 8}
# The reference path, the same rounds (the settle phase off; main before it, counted the same
# way): the refund's transaction is its read, the attempt, the compare-and-set through
# SQLAlchemy, the hold's read, its resolution, the two accounts' totals, the entries (a
# failure: the ceiling's release, no entries) and the state event: 9 on both databases.
REFERENCE_SEND_STATEMENTS = {"sqlite": 16, "postgresql": 14}
REFERENCE_SEND_FAILED_STATEMENTS = {"sqlite": 16, "postgresql": 14}
REFERENCE_RESOLVE_STATEMENTS = {"sqlite": 15, "postgresql": 13}


class _Processor:
    """Every charge succeeds; a refund is answered `answer` (`lost`: no answer)."""

    def __init__(self, answer: str = "succeeded") -> None:
        self.answer = answer

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return ChargeResult(request.request_id, "succeeded", f"ch_{request.request_id}", request.amount_minor, "USD")

    def refund(self, request: RefundRequest) -> RefundResult:
        return self.get_refund(request.request_id)

    def get_refund(self, request_id: str) -> RefundResult:
        if self.answer == "lost":
            raise ProcessorUnreachable("the answer was lost")
        failure = "insufficient_balance" if self.answer == "failed" else None
        return RefundResult(request_id, self.answer, f"re_{request_id}", AMOUNT_MINOR, "USD", failure)  # type: ignore[arg-type]


def processor(answer: str = "succeeded") -> Processor:
    return cast(Processor, _Processor(answer))


def pending_refund(database: Database, tenant_id: str) -> tuple[str, str, str]:
    """(the merchant's account, the payment, a `pending` refund of it)."""
    destination, outcome = created_payment(database, tenant_id, processor(), 2 * AMOUNT_MINOR)
    assert outcome.status == 201, outcome
    payment_id = str(json.loads(outcome.body)["id"])
    refund = database.transaction(
        lambda connection: refunds.create_refund(
            connection, tenant_id, refunds.NewRefund(payment_id, AMOUNT_MINOR), now_us=now_us(), actor=actors.LOCAL
        )
    )
    return destination, payment_id, refund.id


def in_doubt_refund(database: Database, tenant_id: str) -> tuple[str, str, str]:
    """A refund sent, its answer lost: `in_doubt`, due at once."""
    made = pending_refund(database, tenant_id)
    assert rounds.send_due(database, processor("lost"), POLICY, "sender", actor=SEND) == 1
    assert status(database, tenant_id, made[2]) == "in_doubt"
    time.sleep(0.005)  # the first ask is due within 2 ms
    return made


def status(database: Database, tenant_id: str, refund_id: str) -> str:
    with database.read() as connection:
        return refunds.MACHINE.load(connection, tenant_id, refund_id).status


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rounds with the settle phase off: the reference path for every answer."""
    monkeypatch.setattr(settle, "ROUND", None)


def _send(database: Database, tenant_id: str, answer: str) -> list[str]:
    *_, refund_id = pending_refund(database, tenant_id)
    statements = counted(database, lambda: rounds.send_due(database, processor(answer), POLICY, "w", actor=SEND))
    assert status(database, tenant_id, refund_id) == answer
    return statements


def _resolve(database: Database, tenant_id: str) -> list[str]:
    *_, refund_id = in_doubt_refund(database, tenant_id)
    statements = counted(database, lambda: rounds.resolve_due(database, processor(), POLICY, "w", actor=RESOLVE))
    assert status(database, tenant_id, refund_id) == "succeeded"
    return statements


@pytest.mark.parametrize(("answer", "expected"), [("succeeded", SEND_STATEMENTS), ("failed", SEND_FAILED_STATEMENTS)])
def test_a_send_round_settles_by_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    database: Database, answer: str, expected: dict[str, int]
) -> None:
    statements = _send(database, f"send-{answer}", answer)
    dialect = database.engine.dialect.name
    assert (len(run(statements)), statements.count("COMMIT")) == (expected[dialect], COMMITS), run(statements)
    settles = [sql for sql in statements if sql.startswith("SELECT paycore_refunds_settle(")]
    assert len(settles) == (1 if dialect == "postgresql" else 0), statements
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def test_an_ask_round_settles_by_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database) -> None:
    statements = _resolve(database, "resolve")
    dialect = database.engine.dialect.name
    assert (len(run(statements)), statements.count("COMMIT")) == (RESOLVE_STATEMENTS[dialect], COMMITS), statements
    settles = [sql for sql in statements if sql.startswith("SELECT paycore_refunds_settle(")]
    assert len(settles) == (1 if dialect == "postgresql" else 0), statements


@pytest.mark.usefixtures("reference")
def test_the_reference_paths_counts_are_what_the_comments_say(database: Database) -> None:
    dialect = database.engine.dialect.name
    for answer, expected in (("succeeded", REFERENCE_SEND_STATEMENTS), ("failed", REFERENCE_SEND_FAILED_STATEMENTS)):
        statements = _send(database, f"ref-send-{answer}", answer)
        assert len(run(statements)) == expected[dialect], statements
    assert len(run(_resolve(database, "ref-resolve"))) == REFERENCE_RESOLVE_STATEMENTS[dialect]


def facts(database: Database, tenant_id: str, refund_id: str, payment_id: str, destination: str) -> dict[str, Any]:
    """What a round wrote for the refund, ids, references and times left out: its row, its
    events (kind, type, states, cause, actor, sequence, data, snapshot), the payment's refunded
    amount, the hold's transfers and entries, the merchant's balance."""
    params = {"t": tenant_id, "r": refund_id, "p": payment_id}
    with database.read() as connection:
        row = connection.execute(text("SELECT * FROM refunds WHERE tenant_id = :t AND id = :r"), params).one()
        refunded = connection.execute(
            text("SELECT refunded_minor FROM payments WHERE tenant_id = :t AND id = :p"), params
        ).scalar_one()
        found = kept_rows(connection, tenant_id, str(row._mapping["transfer_id"]))
        account = ledger.get_account(connection, tenant_id, destination).balance
        assert ledger.verify(connection).problems == []
        history = events(connection, tenant_id, refund_id)
    return {
        "refund": kept(dict(row._mapping)),
        "events": history,
        "refunded": refunded,
        **found,
        "balance": (account.posted_minor, account.pending_minor, account.available_minor),
    }


@pytest.mark.parametrize("answer", ["succeeded", "failed"])
def test_a_send_rounds_rows_are_the_reference_paths(
    database: Database, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    written = {}
    for tenant_id, plane in ((f"plane-{answer}", settle.ROUND), (f"reference-{answer}", None)):
        monkeypatch.setattr(settle, "ROUND", plane)
        destination, payment_id, refund_id = pending_refund(database, tenant_id)
        with counting(database) as statements:
            assert rounds.send_due(database, processor(answer), POLICY, "w", actor=SEND) == 1
        assert by_plane(statements, "refunds") == (plane is not None), statements
        written[tenant_id] = facts(database, tenant_id, refund_id, payment_id, destination)
    mine, theirs = written[f"plane-{answer}"], written[f"reference-{answer}"]
    assert mine == theirs, differences(mine, theirs)
    assert mine["refund"]["status"] == answer and mine["refund"]["attempts"] == 1


def test_an_ask_rounds_rows_are_the_reference_paths(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    written = {}
    for tenant_id, plane in (("plane-ask", settle.ROUND), ("reference-ask", None)):
        destination, payment_id, refund_id = in_doubt_refund(database, tenant_id)
        monkeypatch.setattr(settle, "ROUND", plane)
        assert rounds.resolve_due(database, processor(), POLICY, "w", actor=RESOLVE) == 1
        monkeypatch.undo()
        written[tenant_id] = facts(database, tenant_id, refund_id, payment_id, destination)
    mine, theirs = written["plane-ask"], written["reference-ask"]
    assert mine == theirs, differences(mine, theirs)
    assert written["plane-ask"]["refund"]["attempts"] == 2


@pytest.mark.parametrize("answer", ["pending", "lost"])
def test_an_answer_that_settles_nothing_is_the_reference_paths(database: Database, answer: str) -> None:
    """`pending` leaves the refund `processing`, no answer makes it `in_doubt`: neither is the
    settle phase's, which writes nothing for them."""
    *_, refund_id = pending_refund(database, f"unplain-{answer}")
    with counting(database) as statements:
        assert rounds.send_due(database, processor(answer), POLICY, "w", actor=SEND) == 1
    assert not by_plane(statements, "refunds"), statements
    assert status(database, f"unplain-{answer}", refund_id) == ("processing" if answer == "pending" else "in_doubt")
