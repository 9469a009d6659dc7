"""Every break type of reconciliation (docs/reconciliation.md, "Break types"), end to end from
the sandbox's fault plan (issue 20), on both databases.

Each test sets one `report_*` fault (docs/sandbox.md, "Wrong reports, on purpose"), makes the
payment, refund or payout through paycore's API and workers as usual, fetches the sandbox's
real settlement report, reconciles it and finds exactly the break that fault makes, naming its
object, while nothing moves that should not: the object keeps its status and history, no fee
is booked from a wrong line, and the books balance. A second run of the same report stores,
moves and books nothing.

| break type             | sandbox fault                                  |
|------------------------|------------------------------------------------|
| `missing_in_paycore`   | `report_unknown_charge`                        |
| `missing_at_processor` | `report_drop_line`                             |
| `amount_mismatch`      | `report_amount_delta`                          |
| `currency_mismatch`    | `report_currency`                              |
| `status_mismatch`      | `report_status`                                |
| `fee_mismatch`         | `report_fee_delta` on a payout                 |
| `duplicate_line`       | `report_duplicate_line`                        |
| `malformed_line`       | `report_malformed_line`                        |
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from paycore.reconciliation import service as reconciliation
from paycore.reconciliation.report import HEADER
from paycore.reconciliation.service import Summary
from paycore_sandbox.report_faults import UNKNOWN_REQUEST_ID_PREFIX
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support as payouts
from tests.integration.reconciliation.test_engine import field, settled_payout
from tests.integration.reconciliation.test_reconcile import breaks, paid, report, today
from tests.integration.refunds import support as refunds
from tests.support.payouts import books_ok


@pytest.fixture
def transport() -> str:
    return "inprocess"


def plan(env: Env, rule: dict[str, Any], op: str) -> None:
    """The sandbox's plan: `rule` on the next call of `op` only."""
    env.sandbox.set_fault_plan({"seed": 1, "rules": [{**rule, "next_n": 1, "ops": [op]}]})


@dataclass(frozen=True)
class Made:
    """An object paycore made with a fault on its line, and the report that has it."""

    kind: str  # payment, refund, payout
    id: str
    lines: list[str]


def made(env: Env, line_type: str, rule: dict[str, Any]) -> Made:
    """A succeeded payment, a succeeded refund (of a payment whose own line is right) or a
    settled payout, whose report line(s) carry `rule`'s fault."""
    if line_type == "charge":
        plan(env, rule, "charge")
        payment = paid(env)
        assert payment["status"] == "succeeded"
        return Made("payment", payment["id"], report(env))
    if line_type == "refund":
        payment = paid(env)
        plan(env, rule, "refund")
        refund = refunds.created(env, payment["id"], 1_000)
        assert refunds.send(env) == 1
        assert refunds.status_of(env, refund["id"]) == "succeeded"
        return Made("refund", refund["id"], report(env))
    assert line_type == "payout"
    payout, lines = settled_payout(env, rules=[{**rule, "next_n": 1, "ops": ["payout"]}])
    assert payouts.get(env, payout["id"])["status"] == "settled"
    return Made("payout", payout["id"], lines)


def state(env: Env, kind: str, object_id: str) -> tuple[str, int]:
    """(status, length of history) of a payment, refund or payout, as the API shows it."""
    path = {"payment": "payments", "refund": "refunds", "payout": "payouts"}[kind]
    response = env.client.get(f"/v1/{path}/{object_id}")
    assert response.status_code == 200, response.text
    shown = response.json()
    return str(shown["status"]), len(shown["history"])


def reconciled(env: Env, lines: list[str]) -> Summary:
    """Reconcile today's report (with the bank's next day, for a payout) without a grace; a
    second run of it must store, move and book nothing."""
    summary = reconciliation.reconcile(env.database, lines, day=today(), grace_ms=0)
    again = reconciliation.reconcile(env.database, lines, day=today(), grace_ms=0)
    assert (sum(again.breaks.values()), again.resolved, again.fees_booked, again.superseded) == (0, 0, 0, 0)
    return summary


def line_of(found: dict[str, Any]) -> list[str]:
    return list(json.loads(found["line"]))


# --- a line that is there but wrong, on a charge, a refund or a payout ---------------------


ALL_LINES = ("charge", "refund", "payout")
# (break type, the fault that makes it, the lines it is shown on)
WRONG_LINES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("missing_at_processor", {"fault": "report_drop_line"}, ALL_LINES),
    ("amount_mismatch", {"fault": "report_amount_delta", "amount_delta_minor": -100}, ALL_LINES),
    ("currency_mismatch", {"fault": "report_currency"}, ALL_LINES),
    # A payout line's status is its event (settled, returned): reported otherwise, it is not a
    # line a report can have (malformed), so status_mismatch is shown on charges and refunds.
    ("status_mismatch", {"fault": "report_status"}, ("charge", "refund")),
    ("duplicate_line", {"fault": "report_duplicate_line"}, ALL_LINES),
]


@pytest.mark.parametrize(
    ("expected", "rule", "line_type"),
    [
        pytest.param(expected, rule, line_type, id=f"{expected}-{line_type}")
        for expected, rule, line_types in WRONG_LINES
        for line_type in line_types
    ],
)
def test_each_fault_on_a_line_is_found_as_its_break(
    env: Env, expected: str, rule: dict[str, Any], line_type: str
) -> None:
    item = made(env, line_type, rule)
    before = state(env, item.kind, item.id)

    summary = reconciled(env, item.lines)

    assert (dict(summary.breaks), summary.resolved) == ({expected: 1}, 0)
    (found,) = breaks(env)
    assert (found["type"], found["status"], found["run_id"]) == (expected, "open", summary.run_id)
    if expected == "duplicate_line":  # the second of two lines in a row is the break; the first counted
        assert (found["object_id"], line_of(found)[HEADER.index("request_id")]) == (None, item.id)
        second, first = item.lines[found["line_number"] - 1], item.lines[found["line_number"] - 2]
        assert line_of(found) == second.rstrip("\r\n").split(",") and first == second
    else:
        assert (found["object_type"], found["object_id"], found["object_status"]) == (item.kind, item.id, before[0])
    if expected == "currency_mismatch":
        assert found["detail"] == "report EUR, paycore USD"
    assert state(env, item.kind, item.id) == before, "a wrong line moves nothing"
    # Fees booked come from lines that matched only: the payment's own line when the fault is on
    # its refund, the first of a duplicated charge line (once). A payout's bank fee was booked
    # by its settlement.
    assert summary.fees_booked == int(line_type == "refund" or (line_type, expected) == ("charge", "duplicate_line"))
    assert books_ok(env.database)


# --- the other three: a line nobody made, a fee, a line that cannot be read ----------------


def test_a_charge_nobody_was_told_of_is_missing_in_paycore(env: Env) -> None:
    item = made(env, "charge", {"fault": "report_unknown_charge"})
    before = state(env, item.kind, item.id)

    summary = reconciled(env, item.lines)

    assert (dict(summary.breaks), summary.resolved, summary.matched) == ({"missing_in_paycore": 1}, 0, 1)
    (found,) = breaks(env)
    unknown = line_of(found)
    assert (found["type"], found["object_id"], found["object_status"]) == ("missing_in_paycore", None, None)
    assert unknown[HEADER.index("request_id")].startswith(UNKNOWN_REQUEST_ID_PREFIX)
    assert (unknown[HEADER.index("type")], unknown[HEADER.index("status")]) == ("charge", "succeeded")
    assert state(env, item.kind, item.id) == before
    assert summary.fees_booked == 1, "the real charge's fee, not the unknown one's"
    assert books_ok(env.database)


def test_a_payout_fee_the_report_states_otherwise_is_a_fee_mismatch(env: Env) -> None:
    item = made(env, "payout", {"fault": "report_fee_delta", "fee_delta_minor": 3})
    before = state(env, item.kind, item.id)

    summary = reconciled(env, item.lines)

    assert (dict(summary.breaks), summary.resolved, summary.fees_booked) == ({"fee_mismatch": 1}, 0, 0)
    (found,) = breaks(env, payouts.TENANT)
    assert (found["object_type"], found["object_id"], found["object_status"]) == ("payout", item.id, "settled")
    assert found["detail"] == "report 28, booked 25"  # the ACH fee of the sandbox bank, 25
    assert state(env, item.kind, item.id) == before
    assert books_ok(env.database)


def test_an_amount_written_in_major_units_is_a_malformed_line_and_proves_nothing(env: Env) -> None:
    """A declined charge, so that nothing else is expected of the report: its only line cannot
    be read (`7.00` for 700 cents), and the payment stays failed."""
    plan(env, {"fault": "report_malformed_line"}, "charge")
    declined = paid(env, token="tok_declined", amount_minor=700)
    assert declined["status"] == "failed"
    lines = report(env)
    assert field(lines[1], "amount_minor") == "7.00"
    before = state(env, "payment", declined["id"])

    summary = reconciled(env, lines)

    assert (dict(summary.breaks), summary.resolved, summary.matched) == ({"malformed_line": 1}, 0, 0)
    (found,) = breaks(env)
    assert (found["type"], found["object_id"], found["line_number"]) == ("malformed_line", None, 2)
    assert found["detail"] == "amount_minor '7.00' is not a whole number of minor units"
    assert line_of(found)[HEADER.index("request_id")] == declined["id"]
    assert state(env, "payment", declined["id"]) == before
    assert books_ok(env.database)


@pytest.mark.parametrize("line_type", ["charge", "refund"])
def test_money_whose_only_line_is_malformed_is_missing_at_processor_too(env: Env, line_type: str) -> None:
    """A line that cannot be read does not stand for the object it seems to name: a payment or
    refund that moved money has no line in the report then."""
    item = made(env, line_type, {"fault": "report_malformed_line"})
    before = state(env, item.kind, item.id)

    summary = reconciled(env, item.lines)

    assert (dict(summary.breaks), summary.resolved) == ({"malformed_line": 1, "missing_at_processor": 1}, 0)
    by_type = {found["type"]: found for found in breaks(env)}
    assert line_of(by_type["malformed_line"])[HEADER.index("request_id")] == item.id
    assert (by_type["missing_at_processor"]["object_id"], by_type["missing_at_processor"]["object_type"]) == (
        item.id,
        item.kind,
    )
    assert state(env, item.kind, item.id) == before
    assert books_ok(env.database)


# --- all of them in one report ---------------------------------------------------------------


def test_one_report_with_every_fault_finds_every_break_type_once(env: Env) -> None:
    """Each fault on its own object, in one day's report: each break is found once, on its
    object, and no fault hides or adds another."""
    objects: dict[str, str] = {}
    cases: list[tuple[str, dict[str, Any], str, int]] = [
        ("missing_at_processor", {"fault": "report_drop_line"}, "tok_ok", 1_100),
        ("amount_mismatch", {"fault": "report_amount_delta", "amount_delta_minor": 7}, "tok_ok", 1_200),
        ("currency_mismatch", {"fault": "report_currency"}, "tok_ok", 1_300),
        ("status_mismatch", {"fault": "report_status"}, "tok_ok", 1_400),
        ("duplicate_line", {"fault": "report_duplicate_line"}, "tok_ok", 1_500),
        ("malformed_line", {"fault": "report_malformed_line"}, "tok_declined", 700),
        ("missing_in_paycore", {"fault": "report_unknown_charge"}, "tok_ok", 1_600),
    ]
    for expected, rule, token, amount_minor in cases:
        plan(env, rule, "charge")
        objects[expected] = paid(env, token=token, amount_minor=amount_minor)["id"]
    fee_rule = {"fault": "report_fee_delta", "fee_delta_minor": -5, "next_n": 1, "ops": ["payout"]}
    payout, lines = settled_payout(env, rules=[fee_rule])
    objects["fee_mismatch"] = payout["id"]

    summary = reconciled(env, lines)

    assert dict(summary.breaks) == dict.fromkeys(objects, 1)
    assert summary.resolved == 0
    named = {}
    for found in breaks(env):
        fields = line_of(found)
        named[found["type"]] = found["object_id"] or (fields[HEADER.index("request_id")] if fields else None)
    unknown = named.pop("missing_in_paycore")
    assert unknown is not None and unknown.startswith(UNKNOWN_REQUEST_ID_PREFIX)
    assert named == {key: value for key, value in objects.items() if key != "missing_in_paycore"}
    assert books_ok(env.database)
