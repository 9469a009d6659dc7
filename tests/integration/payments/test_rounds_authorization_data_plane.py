"""An authorization's resolver rounds on the data plane (ADR 0026 step 3, ADR 0029): a status
query (or the send again) the processor answers `requires_capture` for a manual-capture payment
still `processing` or `in_doubt` is written by the payment's settle phase (`payments/settle.py`'s
`ROUND`: one call of `paycore_payments_authorize` without a call or an answer, migration 0053,
on PostgreSQL; `settle_repository.write_round_move`'s fixed list on SQLite), the hold kept
pending; a declined authorization (`failed`) by `paycore_payments_settle`, the hold voided, as
an automatic payment's. The rows are those the reference path (`lifecycle.apply_evidence`)
writes for the same answer, counted (never timed) on each database, as
tests/integration/payments/test_rounds_data_plane.py counts (a payment changed under the round:
its parametrized race test).
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.payments import settle
from tests.integration.payments.test_rounds_data_plane import (
    AMOUNT_MINOR,
    EXPIRES_AT_US,
    IN_DOUBT,
    PROCESSING,
    compared,
    resolve,
    status,
    waiting_payment,
)
from tests.support.rounds import COMMITS, by_plane, run

MANUAL = "manual"
# One ask round of one authorization the processor answers `requires_capture`: the claim's
# transaction and the payment's (its read for update, the call's attempt, a payment `processing`
# its creating request's answer read), then the phase. SQLite: the compare-and-set, the round's
# schedule in it, and the state event (the hold kept: no ledger row), and BEGIN IMMEDIATE for
# each transaction. PostgreSQL: the round's schedule (one UPDATE) and the phase's one call. A
# declined authorization: an automatic payment's `failed` (the hold voided).
ASK_STATEMENTS = {
    (IN_DOUBT, "requires_capture"): {"sqlite": 9, "postgresql": 7},
    (PROCESSING, "requires_capture"): {"sqlite": 10, "postgresql": 8},
    (IN_DOUBT, "failed"): {"sqlite": 12, "postgresql": 7},
    (PROCESSING, "failed"): {"sqlite": 13, "postgresql": 8},
}
# The reference path, the same rounds (the settle phase off): the payment's transaction is its
# read, the attempt, the compare-and-set through SQLAlchemy and the state event; from
# `processing` also the payment's events read for its creating request's answer and that
# answer's UPDATE (recorded already: it writes nothing). A declined authorization: the hold's
# read, its resolution, the accounts' facts and the two accounts' totals too. An authorization
# from `in_doubt` counts the same on either path (on PostgreSQL the phase's schedule UPDATE and
# call stand for the compare-and-set and the state event): what the phase takes out there is
# SQLAlchemy's building of them, not a statement.
REFERENCE_ASK_STATEMENTS = {
    (IN_DOUBT, "requires_capture"): {"sqlite": 9, "postgresql": 7},
    (PROCESSING, "requires_capture"): {"sqlite": 11, "postgresql": 9},
    (IN_DOUBT, "failed"): {"sqlite": 14, "postgresql": 12},
    (PROCESSING, "failed"): {"sqlite": 16, "postgresql": 14},
}
CASES = list(ASK_STATEMENTS)
FUNCTION = {
    "requires_capture": "SELECT paycore_payments_authorize(",
    "failed": "SELECT * FROM paycore_payments_settle(",
}


@pytest.mark.parametrize(("waiting", "answer"), CASES)
def test_an_authorizations_ask_round_is_one_call_on_postgresql_and_the_fixed_list_on_sqlite(
    database: Database, waiting: str, answer: str
) -> None:
    tenant_id = f"auth-ask-{waiting}-{answer}"
    _, payment_id = waiting_payment(database, tenant_id, waiting, MANUAL)
    statements = resolve(database, tenant_id, asked=answer, capture=MANUAL)
    assert status(database, tenant_id, payment_id) == answer
    dialect = database.engine.dialect.name
    expected = ASK_STATEMENTS[(waiting, answer)][dialect]
    assert (len(run(statements)), statements.count("COMMIT")) == (expected, COMMITS), run(statements)
    calls = [sql for sql in statements if sql.startswith(FUNCTION[answer])]
    assert len(calls) == (1 if dialect == "postgresql" else 0), statements
    assert by_plane(statements, "payments"), statements


def test_the_reference_paths_counts_are_what_the_comments_say(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settle, "ROUND", None)
    dialect = database.engine.dialect.name
    for waiting, answer in CASES:
        tenant_id = f"auth-ref-{waiting}-{answer}"
        waiting_payment(database, tenant_id, waiting, MANUAL)
        statements = resolve(database, tenant_id, asked=answer, capture=MANUAL)
        assert not by_plane(statements, "payments"), statements
        assert len(run(statements)) == REFERENCE_ASK_STATEMENTS[(waiting, answer)][dialect], statements


def _lifetime(database: Database, tenant_id: str) -> list[Any]:
    with database.read() as connection:
        rows = connection.execute(
            text("SELECT authorization_expires_at_us FROM payments WHERE tenant_id = :t"), {"t": tenant_id}
        )
        return [row[0] for row in rows]


@pytest.mark.parametrize(("waiting", "answer"), CASES)
def test_an_authorizations_ask_rounds_rows_are_the_reference_paths(
    database: Database, monkeypatch: pytest.MonkeyPatch, waiting: str, answer: str
) -> None:
    name = f"auth-{waiting}-{answer}"
    mine, _ = compared(database, monkeypatch, name, waiting, capture=MANUAL, asked=answer)
    payment = mine["payment"]
    assert payment["status"] == answer and payment["attempts"] == 1 and payment["capture_method"] == MANUAL
    held = answer == "requires_capture"
    amounts = (AMOUNT_MINOR, 0) if held else (None, None)  # a declined authorization holds nothing
    assert (payment["amount_capturable_minor"], payment["amount_captured_minor"]) == amounts
    assert _lifetime(database, f"plane-{name}") == [EXPIRES_AT_US], "the processor's lifetime, kept"
    assert mine["answer"][0] == 202, "the creating request's answer, recorded before the round, unchanged"
    assert [delivery[0] for delivery in mine["outbox"]][-1] == f"payment.{answer}"
    kinds = [transfer[0] for transfer in mine["transfers"]]
    assert kinds == (["pending"] if held else ["pending", "void"]), "the hold kept pending, or voided"


def test_an_authorizations_send_again_writes_the_reference_paths_rows(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, _ = compared(
        database, monkeypatch, "auth-resend", IN_DOUBT, capture=MANUAL, asked="unknown", charged="requires_capture"
    )
    assert mine["payment"]["status"] == "requires_capture" and mine["payment"]["attempts"] == 1
    calls = [event for event in mine["events"] if event[0] == "processor_call"]
    assert [call[1] for call in calls] == ["processor.charge", "processor.get_charge", "processor.charge"], calls
