"""A credit's planner (ADR 0026): pure, so tested without a database. Its refusals are the
reference path's own (`service.create_credit` calls the same `check_lines`)."""

from __future__ import annotations

import json

import pytest

from paycore.credits import service
from paycore.credits.plan import (
    Credit,
    CreditLine,
    CreditRequest,
    NewIds,
    Plan,
    balance_code,
    issued_code,
    plan_credit,
)
from paycore.kit.errors import InvalidAmount, InvalidRequest, UnsupportedCurrency

IDS = NewIds("cr_1", "txn_1", "acct_b", "acct_i", "ent_d", "ent_c")
NOW_US = 1_700_000_000_000_000


def request(*lines: CreditLine) -> CreditRequest:
    return CreditRequest("acme", "key-1", "f" * 64, lines or (CreditLine("bonus", 199, "USD"),))


def render(credit: Credit) -> str:
    return json.dumps({"id": credit.id, "amount_minor": credit.amount_minor})


def planned(
    req: CreditRequest, known: dict[str, str] | None = None, enabled: frozenset[str] = frozenset({"USD"})
) -> Plan:
    return plan_credit(
        req,
        enabled_currencies=enabled,
        lines_max=3,
        known_account_ids=lambda code: (known or {}).get(code),
        now_us=NOW_US,
        new_ids=IDS,
        render=render,
    )


def test_the_plan_holds_every_row_and_the_answer_built_from_them() -> None:
    plan = planned(request(CreditLine("a", 100, "USD"), CreditLine("b", 99, "USD")))
    assert plan.credit == Credit("cr_1", "acme", "key-1", "USD", 199, plan.credit.lines, "txn_1", NOW_US)
    assert [(a.template.code, a.id, a.known) for a in plan.accounts] == [
        (issued_code("USD"), "acct_i", False),
        (balance_code("USD"), "acct_b", False),
    ]
    assert [(e.id, e.account_code, e.direction, e.amount_minor) for e in plan.entries] == [
        ("ent_d", issued_code("USD"), "debit", 199),
        ("ent_c", balance_code("USD"), "credit", 199),
    ]
    assert (plan.answer_status, plan.answer_body) == (201, render(plan.credit))
    assert json.loads(plan.lines_json) == [
        {"desc": "a", "amount_minor": 100, "currency": "USD"},
        {"desc": "b", "amount_minor": 99, "currency": "USD"},
    ]
    assert len(plan.accounts_to_ensure) == 2


def test_known_accounts_are_not_ensured() -> None:
    plan = planned(request(), {balance_code("USD"): "acct_known_b", issued_code("USD"): "acct_known_i"})
    assert plan.accounts_to_ensure == ()
    assert [a.id for a in plan.accounts] == ["acct_known_i", "acct_known_b"]


@pytest.mark.parametrize(
    ("lines", "error", "message"),
    [
        ((), InvalidRequest, "lines must hold 1 to 3 lines"),
        ((CreditLine("x", 1, "USD"),) * 4, InvalidRequest, "lines must hold 1 to 3 lines"),
        ((CreditLine("x", 0, "USD"),), InvalidAmount, "amount_minor must be a positive JSON integer"),
        ((CreditLine("x", 2**53, "USD"),), InvalidAmount, "amount_minor must be a positive JSON integer"),
        ((CreditLine("x", 1, "EUR"),), UnsupportedCurrency, "currency 'EUR' is not enabled for credits (enabled: USD)"),
        (
            (CreditLine("x", 2**53 - 1, "USD"), CreditLine("y", 1, "USD")),
            InvalidAmount,
            "the lines' amounts add up to more than 2^53 - 1",
        ),
    ],
)
def test_refusals_are_the_reference_paths(lines: tuple[CreditLine, ...], error: type, message: str) -> None:
    with pytest.raises(error) as planned_error:
        planned(CreditRequest("acme", "k", "f" * 64, lines))
    assert str(planned_error.value) == message
    with pytest.raises(error) as reference_error:
        service.create_credit(
            None,  # type: ignore[arg-type]  # refused before any statement
            "acme",
            idempotency_key="k",
            lines=lines,
            enabled_currencies=frozenset({"USD"}),
            lines_max=3,
            now_us=NOW_US,
        )
    assert (type(reference_error.value), str(reference_error.value)) == (error, message)


def test_mixed_currencies_are_refused() -> None:
    lines = (CreditLine("x", 1, "USD"), CreditLine("y", 1, "EUR"))
    with pytest.raises(UnsupportedCurrency, match="all lines of one credit must share a currency"):
        planned(CreditRequest("acme", "k", "f" * 64, lines), enabled=frozenset({"USD", "EUR"}))
