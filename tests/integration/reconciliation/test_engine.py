"""The rest of a run (issue 20, ADR 0014), on both databases: duplicate lines, money the report
has no line for (with its grace), a payout's return applied, fees booked once and a fee booked
before at another amount, a corrected report superseding the breaks it no longer has, and the
day's lease."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.kit import clock
from paycore.ledger.verify import verify
from paycore.reconciliation import days
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.errors import DayBusy
from paycore.reconciliation.report import HEADER
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support as payouts
from tests.integration.reconciliation.test_reconcile import breaks, changed, paid, report, today
from tests.integration.refunds import support as refunds
from tests.support.payouts import books_ok, funded_source


@pytest.fixture
def transport() -> str:
    return "inprocess"


def field(text: str, name: str) -> str:
    return text.rstrip("\r\n").split(",")[HEADER.index(name)]


def line_of(lines: list[str], request_id: str) -> str:
    (found,) = [text for text in lines if field(text, "request_id") == request_id]
    return found


def test_a_second_line_for_one_object_is_a_duplicate_line_and_is_not_applied_twice(env: Env) -> None:
    payment = paid(env)
    lines = report(env)
    doubled = [*lines, line_of(lines, payment["id"])]

    summary = reconciliation.reconcile(env.database, doubled, grace_ms=0)

    assert (summary.lines_read, summary.matched, dict(summary.breaks)) == (2, 1, {"duplicate_line": 1})
    (found,) = breaks(env)
    assert (found["type"], found["line_number"]) == ("duplicate_line", 3)
    assert summary.fees_booked == 1  # once, for the first line
    again = reconciliation.reconcile(env.database, doubled, grace_ms=0)
    assert (sum(again.breaks.values()), again.fees_booked, again.superseded) == (0, 0, 0)


def test_money_the_report_has_no_line_for_is_missing_at_processor_after_the_grace(env: Env) -> None:
    """End to end: the sandbox drops the payment's line from its report (`report_drop_line`)."""
    env.sandbox.set_fault_plan({"seed": 1, "rules": [{"fault": "report_drop_line", "next_n": 1, "ops": ["charge"]}]})
    dropped = paid(env)
    kept = paid(env, amount_minor=900)
    lines = report(env)
    assert [field(text, "request_id") for text in lines[1:]] == [kept["id"]]

    waiting = reconciliation.reconcile(env.database, lines)  # created within the grace: may be in tomorrow's
    assert dict(waiting.breaks) == {}

    summary = reconciliation.reconcile(env.database, lines, grace_ms=0)
    assert dict(summary.breaks) == {"missing_at_processor": 1}
    (found,) = breaks(env)
    assert (found["type"], found["object_type"], found["object_id"], found["object_status"]) == (
        "missing_at_processor",
        "payment",
        dropped["id"],
        "succeeded",
    )
    assert (found["line_number"], found["line"]) == (None, "[]")
    again = reconciliation.reconcile(env.database, lines, grace_ms=0)
    assert (sum(again.breaks.values()), again.superseded) == (0, 0)


def test_a_corrected_report_supersedes_the_open_breaks_it_no_longer_has(env: Env) -> None:
    payment = paid(env)
    declined = paid(env, token="tok_declined", amount_minor=700)
    right = report(env)
    wrong = changed(changed(right, payment["id"], amount_minor="2400"), declined["id"], status="succeeded")
    first = reconciliation.reconcile(env.database, wrong, grace_ms=0)
    assert dict(first.breaks) == {"amount_mismatch": 1, "status_mismatch": 1}

    corrected = changed(right, declined["id"], status="succeeded")  # the amount is right now
    summary = reconciliation.reconcile(env.database, corrected, grace_ms=0)

    assert (dict(summary.breaks), summary.superseded) == ({}, 1)
    by_type = {item["type"]: item["status"] for item in breaks(env)}
    assert by_type == {"amount_mismatch": "superseded", "status_mismatch": "open"}
    back = reconciliation.reconcile(env.database, wrong, grace_ms=0)  # the old report again: found anew
    assert dict(back.breaks) == {"amount_mismatch": 1}
    assert sorted(item["status"] for item in breaks(env)) == ["open", "open", "superseded"]


def test_the_processor_fee_is_booked_once_and_a_different_fee_later_is_a_fee_mismatch(env: Env) -> None:
    payment = paid(env)
    lines = report(env)
    fee = int(field(line_of(lines, payment["id"]), "fee_minor"))
    assert fee > 0

    summary = reconciliation.reconcile(env.database, lines, grace_ms=0)
    again = reconciliation.reconcile(env.database, lines, grace_ms=0)

    assert (summary.fees_booked, dict(summary.fees_minor)) == (1, {"USD": fee})
    assert (again.fees_booked, dict(again.fees_minor)) == (0, {})
    with env.database.read() as connection:
        assert verify(connection).ok
    assert books_ok(env.database)
    other = reconciliation.reconcile(env.database, changed(lines, payment["id"], fee_minor=str(fee + 5)), grace_ms=0)
    assert (dict(other.breaks), other.fees_booked) == ({"fee_mismatch": 1}, 0)
    (found,) = breaks(env)
    assert found["detail"] == f"report {fee + 5}, booked {fee}"


def settled_payout(env: Env, *, rules: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], list[str]]:
    """A payout the bank settled (its webhook delivered), and the report of its days."""
    if rules:
        env.sandbox.set_fault_plan({"seed": 1, "rules": rules})
    source = funded_source(env.database, payouts.TENANT, 10_000)
    payout = payouts.schedule(env, payouts.ach(source))
    assert payouts.queue_and_send(env) == 1
    payouts.bank_finishes(env)
    return payout, report_of_days(env)


def report_of_days(env: Env) -> list[str]:
    """Today's report and the bank's next day's, as one file (a payout settles later)."""
    later = clock.utc_day(clock.now_us() + payouts.BANK_DONE_MS * 1_000).isoformat()
    lines = [text for day in sorted({today(), later}) for text in env.processor.settlement_report(day)]
    return lines[:1] + [text for text in lines[1:] if not text.startswith("type,")]


def test_a_payout_fee_the_report_states_otherwise_is_a_fee_mismatch(env: Env) -> None:
    """End to end: the sandbox reports a payout's fee 3 higher than the bank charged."""
    rules = [{"fault": "report_fee_delta", "fee_delta_minor": 3, "next_n": 1, "ops": ["payout"]}]
    payout, lines = settled_payout(env, rules=rules)
    assert payouts.get(env, payout["id"])["status"] == "settled"

    summary = reconciliation.reconcile(env.database, lines, day=today(), grace_ms=0)

    assert dict(summary.breaks) == {"fee_mismatch": 1}
    (found,) = breaks(env, payouts.TENANT)
    assert (found["object_id"], found["detail"]) == (payout["id"], "report 28, booked 25")


def test_the_day_is_leased_to_one_run_at_a_time(env: Env) -> None:
    paid(env)
    lines = report(env)
    env.database.transaction(lambda c: days.claim(c, today(), "rcn_other", now_us=clock.now_us()))

    with pytest.raises(DayBusy, match="rcn_other"):
        reconciliation.reconcile(env.database, lines)

    env.database.transaction(lambda c: days.release(c, today(), "rcn_other"))
    assert reconciliation.reconcile(env.database, lines).lines_read == 1
    lapsed = clock.now_us() - 1_000_000
    env.database.transaction(lambda c: days.claim(c, today(), "rcn_dead", now_us=lapsed, lease_ms=1))
    assert reconciliation.reconcile(env.database, lines).lines_read == 1  # a lapsed lease is taken over


def test_a_payout_settled_then_returned_is_moved_through_both_by_the_report(env: Env) -> None:
    """The bank's webhooks never came: the settlement line and the return line, in one report,
    move the payout through `settled` to `returned` with the return's code and amounts."""
    source = funded_source(env.database, payouts.TENANT, 10_000)
    payout = payouts.schedule(env, payouts.ach(source, account_number=payouts.RETURNED_R02))
    assert payouts.queue_and_send(env) == 1
    payouts.bank_finishes(env, deliver=False)
    lines = report_of_days(env)
    assert sorted(field(text, "type") for text in lines[1:]) == ["payout", "payout_return"]

    summary = reconciliation.reconcile(env.database, lines, day=today(), grace_ms=0)

    assert (summary.resolved, dict(summary.breaks)) == (2, {})
    returned = payouts.get(env, payout["id"])
    assert (returned["status"], returned["return_code"]) == ("returned", "R02")
    assert [(h["from"], h["to"], h["cause"]) for h in returned["history"]][-2:] == [
        ("sent", "settled", reconciliation.CAUSE),
        ("settled", "returned", reconciliation.CAUSE),
    ]
    assert books_ok(env.database)
    again = reconciliation.reconcile(env.database, lines, day=today(), grace_ms=0)
    assert (again.resolved, sum(again.breaks.values())) == (0, 0)


def test_an_in_doubt_refund_is_resolved_by_the_report(env: Env) -> None:
    payment = paid(env)
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["refund"]})
    refund = refunds.created(env, payment["id"], 400)
    refunds.send(env)
    assert env.client.get(f"/v1/refunds/{refund['id']}").json()["status"] == "in_doubt"

    summary = reconciliation.reconcile(env.database, report(env), grace_ms=0)

    assert (summary.resolved, dict(summary.breaks)) == (1, {})
    shown = env.client.get(f"/v1/refunds/{refund['id']}").json()
    assert shown["status"] == "succeeded"
    assert books_ok(env.database)


def test_an_in_doubt_payout_is_resolved_by_the_report(env: Env) -> None:
    """The send's answer was lost and the resolver never asked again: the report's settlement
    line moves it through `sent` to `settled`."""
    source = funded_source(env.database, payouts.TENANT, 10_000)
    payout = payouts.schedule(env, payouts.ach(source))
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["payout"]})
    payouts.queue_and_send(env)
    assert payouts.get(env, payout["id"])["status"] == "in_doubt"
    payouts.bank_finishes(env, deliver=False)

    summary = reconciliation.reconcile(env.database, report_of_days(env), day=today(), grace_ms=0)

    assert (summary.resolved, dict(summary.breaks)) == (1, {})
    settled = payouts.get(env, payout["id"])
    assert settled["status"] == "settled"
    assert [h["to"] for h in settled["history"]][-2:] == ["sent", "settled"]
    assert books_ok(env.database)
