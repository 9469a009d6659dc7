"""The payment's resolver rounds on the data plane (ADR 0026 step 3): a status query (or the send
again, after the processor's "no record") the processor answers `succeeded` or `failed` for an
automatic payment still `processing` or `in_doubt` is written by the payment's settle phase
(`payments/settle.py`'s `ROUND`, `in_doubt/plane.py`: one call of `paycore_payments_settle`, without
a call or an answer, on PostgreSQL; `settle_repository.write_round_move`'s fixed list on SQLite),
counted (never timed) on each database; the rows are those the reference path
(`lifecycle.apply_evidence`) writes for the same answer; any other answer is still the reference
path's, and so is a payment the phase finds changed under the round (rolled back, run again
careful).

Counted as tests/integration/refunds/test_rounds_data_plane.py counts, around one round of one
payment. `PAYCORE_PRINT_STATEMENTS=1` (pytest -s) prints them.
"""

from __future__ import annotations

import dataclasses
import json
import time
from functools import partial
from typing import Any, cast

import pytest
from sqlalchemy import Connection, text

from paycore.db.engine import Database
from paycore.kit import actors
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.payments import rounds, settle
from paycore.payments import service as payments
from paycore.payments.settle_types import Move
from paycore.processor.port import ChargeRequest, ChargeResult, Processor, ProcessorUnreachable
from tests.support.rounds import (
    COMMITS,
    POLICY,
    by_plane,
    counted,
    created_payment,
    differences,
    endpoint,
    events,
    kept,
    kept_rows,
    outbox,
    run,
)

AMOUNT_MINOR = 1_200
RESOLVE = actors.worker("resolve_payments")
PROCESSING, IN_DOUBT = "processing", "in_doubt"
# The creating request's call answered `pending` (the payment stays `processing`) or lost (`in_doubt`).
WAITING = {PROCESSING: "pending", IN_DOUBT: "lost"}

# One ask round of one payment the processor answers `succeeded` or `failed`, on the data plane.
# Both: the claim's transaction (the tenants with due work, the due payments' read and their
# UPDATE) and, after the call, the payment's: its read for update and the call's attempt
# recorded, then the settle phase. A payment still `processing` first has its creating request's
# answer read (recorded: the move writes none). SQLite: the phase's fixed list, the round's
# schedule in its compare-and-set (the compare-and-set, the hold's resolution, the two accounts'
# totals, the posted entries, the state event; a failure: no entries), and BEGIN IMMEDIATE for
# each transaction. PostgreSQL: the round's schedule (one UPDATE) and the phase's one call.
ASK_STATEMENTS = {
    (IN_DOUBT, "succeeded"): {"sqlite": 13, "postgresql": 7},
    (IN_DOUBT, "failed"): {"sqlite": 12, "postgresql": 7},
    (PROCESSING, "succeeded"): {"sqlite": 14, "postgresql": 8},
    (PROCESSING, "failed"): {"sqlite": 13, "postgresql": 8},
}
# The processor has no record of an `in_doubt` payment, and the send again answers `succeeded`:
# the same, with the second call's attempt.
RESEND_STATEMENTS = {"sqlite": 14, "postgresql": 8}
# The reference path, the same rounds (the settle phase off; main before it, counted the same
# way): the payment's transaction is its read, the attempt, the compare-and-set through
# SQLAlchemy, the hold's read, its resolution, the accounts' facts, the two accounts' totals, the
# entries (none for a failure) and the state event; from `processing` also the payment's events
# read for its creating request's answer and that answer's UPDATE (recorded already: it writes
# nothing). A send again: one attempt more.
REFERENCE_ASK_STATEMENTS = {
    (IN_DOUBT, "succeeded"): {"sqlite": 15, "postgresql": 13},
    (IN_DOUBT, "failed"): {"sqlite": 14, "postgresql": 12},
    (PROCESSING, "succeeded"): {"sqlite": 17, "postgresql": 15},
    (PROCESSING, "failed"): {"sqlite": 16, "postgresql": 14},
}
REFERENCE_RESEND_STATEMENTS = {"sqlite": 16, "postgresql": 14}


# An authorization's lifetime, as the processor names it for a manual charge (ADR 0029).
EXPIRES_AT_US = 4_000_000_000_000_000


class _Processor:
    """A charge (the creating request's, or a round's send again) is answered `charged`; a status
    query `asked` (`unknown`: no record); `lost`: no answer. Every answer is of `amount_minor`;
    a manual charge's (`capture`) with its amounts and `EXPIRES_AT_US`, as the sandbox's."""

    def __init__(
        self,
        charged: str = "pending",
        asked: str = "succeeded",
        amount_minor: int = AMOUNT_MINOR,
        capture: str = "automatic",
    ) -> None:
        self.charged, self.asked, self.amount_minor, self.capture = charged, asked, amount_minor, capture

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return self._result(request.request_id, self.charged)

    def get_charge(self, request_id: str) -> ChargeResult | None:
        return None if self.asked == "unknown" else self._result(request_id, self.asked)

    def _result(self, request_id: str, answer: str) -> ChargeResult:
        if answer == "lost":
            raise ProcessorUnreachable("the answer was lost")
        failure = "card_declined" if answer == "failed" else None
        status = cast(Any, answer)
        result = ChargeResult(request_id, status, f"ch_{request_id}", self.amount_minor, "USD", failure)
        if self.capture != "manual":
            return result
        capturable = self.amount_minor if answer == "requires_capture" else 0
        return dataclasses.replace(
            result,
            capture="manual",
            amount_capturable_minor=capturable,
            amount_captured_minor=0,
            amount_released_minor=0,
            authorization_expires_at_us=EXPIRES_AT_US,
        )


def processor(**answers: Any) -> Processor:
    return cast(Processor, _Processor(**answers))


def waiting_payment(database: Database, tenant_id: str, waiting: str, capture: str = "automatic") -> tuple[str, str]:
    """(the merchant's account, a payment (`capture`: automatic or manual) whose creating
    request's call answered `pending` or was lost: `processing` or `in_doubt`, due at once). The
    tenant's events queue deliveries."""
    endpoint(database, tenant_id)
    charging = processor(charged=WAITING[waiting], capture=capture)
    destination, outcome = created_payment(database, tenant_id, charging, AMOUNT_MINOR, capture=capture)
    assert outcome.status == 202, outcome
    payment_id = str(json.loads(outcome.body)["id"])
    assert status(database, tenant_id, payment_id) == waiting
    time.sleep(0.002)  # the first ask is due at once: past the payment's last change
    return destination, payment_id


def status(database: Database, tenant_id: str, payment_id: str) -> str:
    with database.read() as connection:
        return payments.MACHINE.load(connection, tenant_id, payment_id).status


def parked(database: Database, tenant_id: str) -> None:
    """The tenant's payments taken off the rounds: the next round claims only the payment it is about."""
    database.transaction(
        lambda connection: connection.execute(
            text("UPDATE payments SET next_attempt_at_us = NULL WHERE tenant_id = :t"), {"t": tenant_id}
        )
    )


def resolve(database: Database, tenant_id: str, **answers: Any) -> list[str]:
    """One ask round (it claims the tenant's one payment), counted; the tenant parked after it."""
    statements = counted(
        database, lambda: rounds.resolve_due(database, processor(**answers), POLICY, "w", actor=RESOLVE)
    )
    parked(database, tenant_id)
    return statements


CASES = [(PROCESSING, "succeeded"), (PROCESSING, "failed"), (IN_DOUBT, "succeeded"), (IN_DOUBT, "failed")]


@pytest.mark.parametrize(("waiting", "answer"), CASES)
def test_an_ask_round_settles_by_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    database: Database, waiting: str, answer: str
) -> None:
    tenant_id = f"ask-{waiting}-{answer}"
    _, payment_id = waiting_payment(database, tenant_id, waiting)
    statements = resolve(database, tenant_id, asked=answer)
    assert status(database, tenant_id, payment_id) == answer
    dialect = database.engine.dialect.name
    expected = ASK_STATEMENTS[(waiting, answer)][dialect]
    assert (len(run(statements)), statements.count("COMMIT")) == (expected, COMMITS), run(statements)
    settles = [sql for sql in statements if sql.startswith("SELECT * FROM paycore_payments_settle(")]
    assert len(settles) == (1 if dialect == "postgresql" else 0), statements
    assert by_plane(statements, "payments"), statements
    with database.read() as connection:
        assert ledger.verify(connection).problems == []


def test_a_send_again_settles_by_one_call_on_postgresql_and_the_fixed_list_on_sqlite(database: Database) -> None:
    _, payment_id = waiting_payment(database, "resend", IN_DOUBT)
    statements = resolve(database, "resend", asked="unknown", charged="succeeded")
    assert status(database, "resend", payment_id) == "succeeded"
    dialect = database.engine.dialect.name
    assert (len(run(statements)), statements.count("COMMIT")) == (RESEND_STATEMENTS[dialect], COMMITS), statements
    assert by_plane(statements, "payments"), statements


def test_the_reference_paths_counts_are_what_the_comments_say(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settle, "ROUND", None)
    dialect = database.engine.dialect.name
    for waiting, answer in CASES:
        tenant_id = f"ref-{waiting}-{answer}"
        waiting_payment(database, tenant_id, waiting)
        statements = resolve(database, tenant_id, asked=answer)
        assert not by_plane(statements, "payments"), statements
        assert len(run(statements)) == REFERENCE_ASK_STATEMENTS[(waiting, answer)][dialect], statements
    waiting_payment(database, "ref-resend", IN_DOUBT)
    statements = resolve(database, "ref-resend", asked="unknown", charged="succeeded")
    assert len(run(statements)) == REFERENCE_RESEND_STATEMENTS[dialect], statements


def facts(database: Database, tenant_id: str, payment_id: str, destination: str) -> dict[str, Any]:
    """What the rounds wrote for the payment, ids, references and times left out: its row, its
    events (the calls' attempts among them), the hold's transfers and entries, its creating
    request's answer, the deliveries its events queued, the merchant's and the clearing account's
    balances."""
    with database.read() as connection:
        row = dict(connection.execute(payments_row, {"t": tenant_id, "p": payment_id}).one()._mapping)
        answer = connection.execute(
            text('SELECT response_status, response_body FROM idempotency_keys WHERE tenant_id = :t AND "key" = :k'),
            {"t": tenant_id, "k": row["idempotency_key"]},
        ).one()
        clearing = ledger.find_account_by_code(connection, tenant_id, chart.processor_clearing("USD"))
        assert clearing is not None
        balances = [ledger.get_account(connection, tenant_id, destination).balance, clearing.balance]
        assert ledger.verify(connection).problems == []
        found = {
            "payment": kept(row),
            "events": events(connection, tenant_id, payment_id),
            **kept_rows(connection, tenant_id, str(row["transfer_id"])),
            "answer": kept(tuple(answer)),
            "outbox": outbox(connection, tenant_id, payment_id),
        }
    return {**found, "balances": [(b.posted_minor, b.pending_minor, b.available_minor) for b in balances]}


payments_row = text("SELECT * FROM payments WHERE tenant_id = :t AND id = :p")


def compared(
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    waiting: str,
    *,
    plane: bool = True,
    capture: str = "automatic",
    **answers: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The facts of one round over a payment `waiting` (`capture`), with the rounds' settle phase
    as it is (`plane`: it must have written the move; else it must not have) and off: (its, the
    reference path's)."""
    written = {}
    for tenant_id, phase in ((f"plane-{name}", settle.ROUND), (f"reference-{name}", None)):
        destination, payment_id = waiting_payment(database, tenant_id, waiting, capture)
        monkeypatch.setattr(settle, "ROUND", phase)
        statements = resolve(database, tenant_id, capture=capture, **answers)
        monkeypatch.undo()
        assert by_plane(statements, "payments") == (plane and phase is not None), statements
        written[tenant_id] = facts(database, tenant_id, payment_id, destination)
    mine, theirs = written[f"plane-{name}"], written[f"reference-{name}"]
    assert mine == theirs, differences(mine, theirs)
    return mine, theirs


@pytest.mark.parametrize(("waiting", "answer"), CASES)
def test_an_ask_rounds_rows_are_the_reference_paths(
    database: Database, monkeypatch: pytest.MonkeyPatch, waiting: str, answer: str
) -> None:
    mine, _ = compared(database, monkeypatch, f"{waiting}-{answer}", waiting, asked=answer)
    assert mine["payment"]["status"] == answer and mine["payment"]["attempts"] == 1
    assert mine["answer"][0] == 202, "the creating request's answer, recorded before the round, unchanged"
    assert [delivery[0] for delivery in mine["outbox"]][-1] == f"payment.{answer}"


def test_a_rounds_send_again_writes_the_reference_paths_rows(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, _ = compared(database, monkeypatch, "resend", IN_DOUBT, asked="unknown", charged="succeeded")
    assert mine["payment"]["status"] == "succeeded" and mine["payment"]["attempts"] == 1
    calls = [event for event in mine["events"] if event[0] == "processor_call"]
    assert [call[1] for call in calls] == ["processor.charge", "processor.get_charge", "processor.charge"], calls


@pytest.mark.parametrize(
    ("name", "waiting", "answers", "left"),
    [
        ("pending", PROCESSING, {"asked": "pending"}, PROCESSING),
        ("lost", PROCESSING, {"asked": "lost"}, IN_DOUBT),
        ("mismatch", IN_DOUBT, {"asked": "succeeded", "amount_minor": AMOUNT_MINOR + 1}, IN_DOUBT),
    ],
)
def test_an_answer_the_phase_does_not_take_is_the_reference_paths(
    database: Database, monkeypatch: pytest.MonkeyPatch, name: str, waiting: str, answers: dict[str, Any], left: str
) -> None:
    """`pending` leaves the payment `processing`, no answer makes it `in_doubt`, an answer of
    another amount moves nothing: none is the settle phase's, which writes nothing for them."""
    mine, _ = compared(database, monkeypatch, name, waiting, plane=False, **answers)
    assert mine["payment"]["status"] == left


def _unanswered(connection: Connection, tenant_id: str) -> None:
    connection.execute(
        text("UPDATE idempotency_keys SET response_status = NULL, response_body = NULL WHERE tenant_id = :t"),
        {"t": tenant_id},
    )


def test_a_payment_whose_creating_request_was_never_answered_is_the_reference_paths(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process that accepted the payment died before its answer was recorded: the reference
    path writes the answer with the move from `processing`, which the phase's move does not."""
    written = {}
    for tenant_id, phase in (("plane-unanswered", settle.ROUND), ("reference-unanswered", None)):
        destination, payment_id = waiting_payment(database, tenant_id, PROCESSING)
        database.transaction(partial(_unanswered, tenant_id=tenant_id))
        monkeypatch.setattr(settle, "ROUND", phase)
        assert not by_plane(resolve(database, tenant_id, asked="succeeded"), "payments")
        monkeypatch.undo()
        written[tenant_id] = facts(database, tenant_id, payment_id, destination)
    mine, theirs = written["plane-unanswered"], written["reference-unanswered"]
    assert mine == theirs, differences(mine, theirs)
    assert mine["answer"][0] == 201 and mine["payment"]["status"] == "succeeded"


@pytest.mark.parametrize(("capture", "answer"), [("automatic", "failed"), ("manual", "requires_capture")])
def test_a_payment_changed_under_the_round_is_rolled_back_and_moved_by_the_reference_path(
    database: Database, monkeypatch: pytest.MonkeyPatch, capture: str, answer: str
) -> None:
    """The phase's compare-and-set finds the payment changed (settled first, as by a webhook: here
    in the round's own transaction, just before the phase's write, since nothing else can change
    it under the round's lock): the phase raises, nothing of the round's first run stays, and the
    round runs again careful, on the reference path, which writes what it writes without the race."""
    tries: list[str] = []

    def moved_first(connection: Connection, move: Move) -> Move:
        """`move`, its payment settled first (`succeeded`, a microsecond before the move's time)."""
        tries.append(move.payment.id)
        connection.execute(
            text("UPDATE payments SET status = 'succeeded', updated_at_us = :u WHERE tenant_id = :t AND id = :p"),
            {"u": move.payment.updated_at_us - 1, "t": move.accepted.tenant_id, "p": move.accepted.id},
        )
        return move

    phase = settle.ROUND
    racing = dataclasses.replace(
        phase,
        write_move=lambda connection, move: phase.write_move(connection, moved_first(connection, move)),
        call=lambda connection, move: phase.call(connection, moved_first(connection, move)),
    )
    written = {}
    for tenant_id, raced in ((f"plane-raced-{capture}", racing), (f"reference-raced-{capture}", None)):
        destination, payment_id = waiting_payment(database, tenant_id, IN_DOUBT, capture)
        monkeypatch.setattr(settle, "ROUND", raced)
        resolve(database, tenant_id, asked=answer, capture=capture)
        monkeypatch.undo()
        written[tenant_id] = facts(database, tenant_id, payment_id, destination)
    assert len(tries) == 1, "the careful run is the reference path's"
    mine, theirs = written[f"plane-raced-{capture}"], written[f"reference-raced-{capture}"]
    assert mine == theirs, differences(mine, theirs)
    assert mine["payment"]["status"] == answer and mine["payment"]["attempts"] == 1
