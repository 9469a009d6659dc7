"""Issue 30: a reconciliation break's status changes through the lifecycle's one status change
(`lifecycle.transition.change`), as a payment's does, each with its audit note in the same
transaction: resolved by a person, superseded by a corrected report of its day."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from paycore.audit.models import events
from paycore.reconciliation import service as reconciliation
from tests.integration.payments.conftest import Env
from tests.integration.reconciliation.test_http import breaks_of, one_break, resolve, transport, wrong_report
from tests.integration.reconciliation.test_reconcile import today
from tests.support.transitions import watch

__all__ = ["transport"]


def notes_of_type(env: Env, event_type: str) -> int:
    with env.database.read() as connection:
        query = select(func.count()).select_from(events).where(events.c.type == event_type)
        return int(connection.execute(query).scalar_one())


def test_breaks_resolved_and_superseded_change_status_in_one_place(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    found = wrong_report(env)
    mismatch = one_break(env, "amount_mismatch")
    seen = watch(monkeypatch)

    response = resolve(env, mismatch["id"], {"resolution": "accepted"}, "resolve-1")
    assert response.status_code == 200, response.text
    corrected = list(env.processor.settlement_report(today()))
    reconciliation.reconcile(env.database, corrected)  # the day's other open breaks superseded

    moves = [(table, move, changed) for table, move, changed in seen if table == "reconciliation_breaks"]
    assert moves == [
        ("reconciliation_breaks", ("open", "resolved"), 1),
        *[("reconciliation_breaks", ("open", "superseded"), 1)] * 3,
    ], seen
    assert {table for table, _, _ in seen} <= {"reconciliation_breaks", "payments"}, seen
    assert breaks_of(env, status="open") == [] and breaks_of(env, "other", status="open") == []
    assert (
        notes_of_type(env, "reconciliation.break_resolved"),
        notes_of_type(env, "reconciliation.break_superseded"),
    ) == (
        1,
        3,
    )
    assert found["run_id"]
