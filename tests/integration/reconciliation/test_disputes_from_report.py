"""A dispute's lines in the sandbox's real settlement report (SPEC §6.2, issue 41 point 4):
`dispute_withdrawal`, `dispute_fee` and `dispute_reinstatement` matched with what paycore
recorded of the dispute, on both databases. A tok_disputed payment's day reconciles clean, a won
dispute's reinstatement matches, another amount is `amount_mismatch`, a dispute paycore does not
know is `missing_in_paycore` (and is not made from the line), and a chargeback the report has no
withdrawal for is `missing_at_processor` after the grace, as any money paycore believes moved."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.ledger.verify import verify
from paycore.reconciliation import chunks, matching
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.matching import Known, Verdict
from paycore.reconciliation.report import HEADER, Line
from tests.integration.disputes.support import (
    LATER_US,
    caught,
    disputes_of,
    evidence_at_sandbox,
    later,
    open_at_sandbox,
    paid,
)
from tests.integration.payments.conftest import Env
from tests.integration.reconciliation.test_reconcile import breaks, report, today

FEE_MINOR = 1500  # the sandbox's dispute fee


@pytest.fixture
def transport() -> str:
    return "inprocess"


def charged_back(env: Env, amount_minor: int = 5000) -> dict[str, Any]:
    """A tok_disputed payment, its chargeback opened at the sandbox and recorded by paycore."""
    payment = paid(env, env.account(), amount_minor, token="tok_disputed")
    opened_at = later()
    assert env.sandbox.settle_due(opened_at) >= 1
    assert env.deliver(opened_at) >= 1  # dispute.created
    [dispute] = disputes_of(env, payment["id"])
    assert dispute["status"] == "needs_response"
    return {"payment": payment, "dispute": dispute}


def types(lines: list[str]) -> list[str]:
    """The line types of the report, in order (a dispute's fee and withdrawal share a moment)."""
    return [text.split(",")[0] for text in lines[1:]]


def amounts(lines: list[str]) -> dict[str, int]:
    return {field(text, "type"): int(field(text, "amount_minor")) for text in lines[1:]}


def field(text: str, name: str) -> str:
    return text.rstrip("\r\n").split(",")[HEADER.index(name)]


def changed(lines: list[str], line_type: str, **values: str) -> list[str]:
    """The report with the fields of its `line_type` lines replaced (a wrong report)."""
    out = []
    for text in lines:
        fields = text.rstrip("\r\n").split(",")
        if fields[0] == line_type:
            for name, value in values.items():
                fields[HEADER.index(name)] = value
            text = ",".join(fields) + "\r\n"
        out.append(text)
    return out


def test_a_tok_disputed_payments_day_reconciles_clean(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    disputed = charged_back(env)
    lines = report(env)
    judged: list[str] = []

    def judge(line: Line, known: Known | None) -> Verdict:
        judged.append(line.type)
        return matching.judge(line, known)

    monkeypatch.setattr(chunks, "judge", judge)
    assert amounts(lines) == {"charge": 5000, "dispute_withdrawal": 5000, "dispute_fee": FEE_MINOR}

    summary = reconciliation.reconcile(env.database, lines, grace_ms=0)

    assert (summary.lines_read, summary.matched, dict(summary.breaks)) == (3, 3, {})
    assert breaks(env) == []
    assert judged == []  # every line matched set-based (staging), none judged one by one
    assert summary.fees_booked == 1  # the charge's processor fee; a dispute line books none
    again = reconciliation.reconcile(env.database, lines, grace_ms=0)
    assert (again.matched, dict(again.breaks), again.fees_booked) == (3, {}, 0)
    assert disputes_of(env, disputed["payment"]["id"]) == [disputed["dispute"]]  # the report moved nothing
    with env.database.read() as connection:
        assert verify(connection).ok


def test_a_won_disputes_reinstatement_matches(env: Env) -> None:
    disputed = charged_back(env)
    processor_dispute_id = env.sandbox.disputes_of_charge(disputed["payment"]["id"])[0].dispute_id
    evidence_at_sandbox(env, processor_dispute_id, "signed delivery receipt: winning_evidence")
    decided_at = later() + LATER_US
    env.sandbox.settle_due(decided_at)
    assert env.deliver(decided_at) >= 2
    assert disputes_of(env, disputed["payment"]["id"])[0]["status"] == "won"
    lines = report(env)
    assert sorted(types(lines)) == ["charge", "dispute_fee", "dispute_reinstatement", "dispute_withdrawal"]

    summary = reconciliation.reconcile(env.database, lines, grace_ms=0)

    assert (summary.lines_read, summary.matched, dict(summary.breaks)) == (4, 4, {})


def test_a_reinstatement_paycore_did_not_make_is_a_status_mismatch(env: Env) -> None:
    """The report says won; paycore still holds the chargeback open (its webhooks not arrived)."""
    disputed = charged_back(env)
    processor_dispute_id = env.sandbox.disputes_of_charge(disputed["payment"]["id"])[0].dispute_id
    evidence_at_sandbox(env, processor_dispute_id, "winning_evidence")
    decided_at = later() + LATER_US
    env.sandbox.settle_due(decided_at)
    caught(env, decided_at)  # dispute.updated and dispute.closed never reach paycore

    summary = reconciliation.reconcile(env.database, report(env), grace_ms=0)

    assert dict(summary.breaks) == {"status_mismatch": 1}
    (found,) = breaks(env)
    assert (found["object_type"], found["object_id"], found["object_status"]) == (
        "dispute",
        disputed["dispute"]["id"],
        "needs_response",
    )
    assert "dispute_reinstatement" in found["detail"]


@pytest.mark.parametrize(("line_type", "amount_minor"), [("dispute_withdrawal", "4999"), ("dispute_fee", "1400")])
def test_another_amount_is_an_amount_mismatch(env: Env, line_type: str, amount_minor: str) -> None:
    disputed = charged_back(env)
    lines = changed(report(env), line_type, amount_minor=amount_minor)

    summary = reconciliation.reconcile(env.database, lines, grace_ms=0)

    assert (summary.matched, dict(summary.breaks)) == (2, {"amount_mismatch": 1})
    (found,) = breaks(env)
    expected = 5000 if line_type == "dispute_withdrawal" else FEE_MINOR
    assert (found["type"], found["object_type"], found["object_id"], found["detail"]) == (
        "amount_mismatch",
        "dispute",
        disputed["dispute"]["id"],
        f"report {amount_minor}, paycore {expected}",
    )
    assert found["line_number"] == 1 + types(lines).index(line_type) + 1


def test_a_dispute_paycore_does_not_know_is_missing_in_paycore_and_not_made(env: Env) -> None:
    payment = paid(env, env.account(), 5000)
    processor_dispute_id = open_at_sandbox(env, payment)
    caught(env)  # dispute.created never reaches paycore
    lines = report(env)
    assert sorted(types(lines)) == ["charge", "dispute_fee", "dispute_withdrawal"]

    summary = reconciliation.reconcile(env.database, lines, grace_ms=0)

    assert (summary.matched, dict(summary.breaks)) == (1, {"missing_in_paycore": 2})
    found = sorted((item["type"], item["object_type"], item["detail"]) for item in breaks(env))
    assert found == [("missing_in_paycore", None, f"no dispute {processor_dispute_id}")] * 2
    assert disputes_of(env, payment["id"]) == []  # the line is not the dispute's evidence here


def test_a_chargeback_the_report_has_no_withdrawal_for_is_missing_at_processor(env: Env) -> None:
    disputed = charged_back(env)
    lines = [text for text in report(env) if not text.startswith("dispute_withdrawal,")]

    waiting = reconciliation.reconcile(env.database, lines, day=today())  # within the grace: may be tomorrow's
    assert dict(waiting.breaks) == {}

    summary = reconciliation.reconcile(env.database, lines, day=today(), grace_ms=0)

    assert (summary.matched, dict(summary.breaks)) == (2, {"missing_at_processor": 1})
    (found,) = breaks(env)
    assert (found["object_type"], found["object_id"], found["object_status"], found["line"]) == (
        "dispute",
        disputed["dispute"]["id"],
        "needs_response",
        "[]",
    )
    assert found["detail"] == f"no dispute_withdrawal line for dispute {disputed['dispute']['id']} (needs_response)"
