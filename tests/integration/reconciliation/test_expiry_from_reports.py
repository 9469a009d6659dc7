"""An expiry the reports imply (SPEC §6.1, issue 40 point 4; `reconciliation/expiry.py`), on
both databases, with the real sandbox and its real reports: an in-doubt capture is resolved
`canceled` (`expired`) only when the complete reports of every day from its authorization
through its expiry (plus the grace) leave its capture out. A day not reconciled, reconciled
before it ended or from a person's file, an expiry not passed (or its grace reaching into a day
not over), a capture line (even one that proves nothing), or a malformed line quoting the
payment: it stays in doubt, for the resolver's status query. The happy path and a re-run are in
test_captures_from_report.py."""

from __future__ import annotations

import datetime as dt
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import text

from paycore.kit import actors, clock
from paycore.ledger.verify import verify
from paycore.reconciliation import expiry
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.service import CAUSE
from tests.integration.payments.capture_support import authorized, capture, history, money, payment
from tests.integration.payments.conftest import Env
from tests.support import tamper

HOUR_US = 3_600_000_000


@pytest.fixture
def transport() -> str:
    return "inprocess"


def day_ago(days: int) -> dt.date:
    return dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days)


def at(day: dt.date, seconds: float) -> int:
    """A moment `seconds` after the day's start (negative: before it), in µs."""
    return clock.day_start_us(day) + int(seconds * 1_000_000)


def place(env: Env, payment_id: str, *, made_us: int, expires_us: int) -> None:
    """Move the authorization's making and expiry (real SQL, as the clock would have done)."""
    with env.database.engine.connect() as connection, connection.begin():
        moved = connection.execute(
            text("UPDATE payments SET created_at_us = :made, authorization_expires_at_us = :expires WHERE id = :id"),
            {"made": made_us, "expires": expires_us, "id": payment_id},
        )
        assert moved.rowcount == 1


def in_doubt_capture(
    env: Env, merchant: str, *, token: str = "tok_expires_quickly", fault: str = "drop_request"
) -> dict[str, Any]:
    paid = authorized(env, merchant, 4000, token=token)
    env.faults({"fault": fault, "next_n": 1, "ops": ["capture"]})
    assert capture(env, paid["id"], 3000).json()["in_doubt_operation"] == "capture"
    if token == "tok_expires_quickly":
        time.sleep(2.2)  # the authorization's lifetime ends at the processor
    result: dict[str, Any] = paid
    return result


def run(env: Env, day: dt.date, *, lines: list[str] | None = None, source: str = "processor", grace_ms: int = 0) -> Any:
    report = list(env.processor.settlement_report(day.isoformat())) if lines is None else lines
    return reconciliation.reconcile(env.database, report, source=source, day=day.isoformat(), grace_ms=grace_ms)


def still_in_doubt(env: Env, paid: dict[str, Any], merchant: str) -> None:
    body = payment(env, paid["id"])
    assert (body["status"], body["in_doubt_operation"]) == ("in_doubt", "capture")
    assert money(env, merchant) == (0, 4000)


def test_across_midnight_each_day_of_its_life_must_be_complete(env: Env) -> None:
    merchant = env.account()
    paid = in_doubt_capture(env, merchant)
    # Made at 23:59:59.5 two days ago, expired at 00:00:00.5 yesterday: its life spans two days.
    place(env, paid["id"], made_us=at(day_ago(1), -0.5), expires_us=at(day_ago(1), 0.5))

    first = run(env, day_ago(2))

    assert first.resolved == 0  # a capture at 23:59:59.9 would be in the next day's report
    still_in_doubt(env, paid, merchant)

    second = run(env, day_ago(1))

    assert second.resolved == 1
    body = payment(env, paid["id"])
    assert (body["status"], body["cancellation_reason"]) == ("canceled", "expired")
    assert history(env, paid["id"])[-1] == ("in_doubt", "canceled", CAUSE)
    assert money(env, merchant) == (0, 0)
    assert run(env, day_ago(2)).resolved == 0  # a re-run of either day: nothing moves twice
    assert money(env, merchant) == (0, 0)
    with env.database.read() as connection:
        assert verify(connection).ok


def test_a_day_reconciled_before_it_ended_or_from_a_file_is_not_complete(env: Env) -> None:
    merchant = env.account()
    paid = in_doubt_capture(env, merchant)  # made and expired today, seconds ago

    assert run(env, day_ago(0)).resolved == 0  # today's report: the day is not over
    still_in_doubt(env, paid, merchant)

    place(env, paid["id"], made_us=at(day_ago(1), 3600), expires_us=at(day_ago(1), 3602))
    header = list(env.processor.settlement_report(day_ago(1).isoformat()))
    assert run(env, day_ago(1), lines=header, source="file").resolved == 0  # a person's file: maybe a part
    still_in_doubt(env, paid, merchant)
    assert run(env, day_ago(1)).resolved == 1  # the processor's own report, after the day ended


def test_a_file_run_after_the_processors_report_leaves_the_day_incomplete(env: Env) -> None:
    merchant = env.account()
    first = in_doubt_capture(env, merchant)
    place(env, first["id"], made_us=at(day_ago(1), 3600), expires_us=at(day_ago(1), 3602))
    header = list(env.processor.settlement_report(day_ago(1).isoformat()))
    assert run(env, day_ago(1)).resolved == 1  # the processor's report: complete, moved
    second = in_doubt_capture(env, merchant)
    place(env, second["id"], made_us=at(day_ago(1), 7200), expires_us=at(day_ago(1), 7202))

    # The day's latest run read a file (its lines are the day's now): not the processor's word.
    assert run(env, day_ago(1), lines=header, source="file").resolved == 0

    assert payment(env, second["id"])["status"] == "in_doubt"


def test_an_expiry_not_passed_leaves_it_in_doubt(env: Env) -> None:
    merchant = env.account()
    paid = in_doubt_capture(env, merchant, token="tok_ok")  # the sandbox's 7 days
    place(env, paid["id"], made_us=at(day_ago(1), 3600), expires_us=clock.now_us() + 6 * 24 * HOUR_US)

    summary = run(env, day_ago(1))

    assert (summary.resolved, dict(summary.breaks)) == (0, {})
    still_in_doubt(env, paid, merchant)


def test_the_grace_reaching_into_a_day_not_over_leaves_it_in_doubt(env: Env) -> None:
    merchant = env.account()
    paid = in_doubt_capture(env, merchant)
    # Expired at 23:30 yesterday: a capture at 23:29 may be in today's report (the hour's grace).
    place(env, paid["id"], made_us=at(day_ago(0), -3600), expires_us=at(day_ago(0), -1800))

    assert run(env, day_ago(1), grace_ms=3_600_000).resolved == 0
    still_in_doubt(env, paid, merchant)
    assert run(env, day_ago(1), grace_ms=0).resolved == 1  # without a grace yesterday holds it all


def test_a_capture_line_that_proves_nothing_is_still_a_line(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "report_amount_delta", "amount_delta_minor": -500, "next_n": 1, "ops": ["charge"]})
    paid = in_doubt_capture(env, merchant, fault="drop_response")  # captured; the answer lost
    lines = list(env.processor.settlement_report(day_ago(0).isoformat()))
    place(env, paid["id"], made_us=at(day_ago(1), 3600), expires_us=at(day_ago(1), 3602))

    # Today's capture line, as yesterday's complete report (the processor captured in time).
    summary = run(env, day_ago(1), lines=lines)

    assert (summary.resolved, dict(summary.breaks)) == (0, {"amount_mismatch": 1})
    still_in_doubt(env, paid, merchant)
    env.resolve()  # the status query: captured
    assert (payment(env, paid["id"])["status"], money(env, merchant)) == ("succeeded", (3000, 0))


def test_a_capture_line_in_a_complete_report_resolves_it_captured_not_expired(env: Env) -> None:
    merchant = env.account()
    paid = in_doubt_capture(env, merchant, fault="drop_response")
    lines = list(env.processor.settlement_report(day_ago(0).isoformat()))
    place(env, paid["id"], made_us=at(day_ago(1), 3600), expires_us=at(day_ago(1), 3602))

    summary = run(env, day_ago(1), lines=lines)

    assert (summary.resolved, dict(summary.breaks)) == (1, {})
    body = payment(env, paid["id"])
    assert (body["status"], body["amount_captured_minor"]) == ("succeeded", 3000)
    assert money(env, merchant) == (3000, 0)


def test_a_malformed_line_quoting_the_payment_leaves_it_in_doubt(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "report_malformed_line", "next_n": 1, "ops": ["charge"]})
    paid = in_doubt_capture(env, merchant, fault="drop_response")
    lines = list(env.processor.settlement_report(day_ago(0).isoformat()))
    place(env, paid["id"], made_us=at(day_ago(1), 3600), expires_us=at(day_ago(1), 3602))

    summary = run(env, day_ago(1), lines=lines)

    assert (summary.resolved, dict(summary.breaks)) == (0, {"malformed_line": 1})
    still_in_doubt(env, paid, merchant)  # its capture may be the line paycore could not read


def test_two_processes_resolving_at_once_move_it_once(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 4000, token="tok_expires_quickly")
    place(env, paid["id"], made_us=at(day_ago(1), 3600), expires_us=at(day_ago(1), 3602))
    done = run(env, day_ago(1))  # complete, while the authorization was still open: nothing to do
    env.faults({"fault": "drop_request", "next_n": 1, "ops": ["capture"]})
    assert capture(env, paid["id"], 3000).json()["in_doubt_operation"] == "capture"
    barrier = threading.Barrier(2)

    def sweep() -> int:
        barrier.wait()
        return expiry.resolve_implied(env.database, grace_ms=0, run_id=done.run_id, actor=actors.reconcile(done.run_id))

    with ThreadPoolExecutor(max_workers=2) as pool:
        moved = [future.result() for future in [pool.submit(sweep), pool.submit(sweep)]]

    assert sorted(moved) == [0, 1]
    steps = history(env, paid["id"])
    assert steps.count(("in_doubt", "canceled", CAUSE)) == 1 and steps[-1] == ("in_doubt", "canceled", CAUSE)
    assert money(env, merchant) == (0, 0)
    with env.database.read() as connection:
        assert verify(connection).ok


def test_one_that_cannot_be_moved_stays_in_doubt_and_the_others_are_resolved(env: Env) -> None:
    merchant = env.account()
    poisoned, other = in_doubt_capture(env, merchant), in_doubt_capture(env, merchant)
    for paid in (poisoned, other):
        place(env, paid["id"], made_us=at(day_ago(1), 3600), expires_us=at(day_ago(1), 3602))
    with env.database.read() as connection:
        tenant_id, transfer_id = connection.execute(
            text("SELECT tenant_id, transfer_id FROM payments WHERE id = :id"), {"id": poisoned["id"]}
        ).one()
    tamper.void_hold(env.database, tenant_id, transfer_id)  # its hold resolved behind its back: a bug

    summary = run(env, day_ago(1))

    assert summary.resolved == 1
    assert payment(env, poisoned["id"])["status"] == "in_doubt"  # the log has it (work_fault)
    assert (payment(env, other["id"])["status"], money(env, merchant)) == ("canceled", (0, 0))
