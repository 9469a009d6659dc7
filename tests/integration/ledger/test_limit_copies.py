"""Every copy of the balance limits says what `paycore.ledger.limits` says (issue 30, point 3).

The rule has one home, `paycore.ledger.limits`; the SQL copies exist because a transfer on
PostgreSQL is one server call (ADR 0011) and migrations are history. These tests read the
function `paycore_create_transfer` (and the other copies: `paycore_ledger_move`, a hold's post or
void and a reversal, migration 0055) as it stands in a migrated PostgreSQL database (`pg_proc`),
evaluate its bounds, figures and refusal conditions on the same cases as the Python rule, and
run `_APPLY_TOTALS` at its bound on both databases: a change to one copy without the others
fails here.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from sqlalchemy import Connection, text

from paycore.db.engine import Database
from paycore.invariants.checks import CHECKS
from paycore.kit.clock import now_us
from paycore.ledger import repository
from paycore.ledger import service as ledger
from paycore.ledger.balances import Totals
from paycore.ledger.limits import (
    BALANCE_LIMIT_MINOR,
    TOTAL_MINOR_MAX,
    bound_before_adding,
    breaks_no_overdraft,
    grows_past,
    limited_figures,
)

_TOTAL_NAMES = ("debits_posted", "credits_posted", "debits_pending", "credits_pending")


def _cases() -> list[tuple[str, Totals, Totals]]:
    """(normal balance, totals before, delta >= 0) around the balance limit and zero, both ways."""
    rng = random.Random(30)
    near = [0, 1, 5, BALANCE_LIMIT_MINOR - 5, BALANCE_LIMIT_MINOR, BALANCE_LIMIT_MINOR + 1, 2 * BALANCE_LIMIT_MINOR]
    cases = []
    for normal in ("credit", "debit"):
        for _ in range(60):
            before = Totals(*(rng.choice(near) + rng.randrange(0, 7) for _ in range(4)))
            delta = Totals(*(rng.choice((0, 0, 1, 5, 6, 11, BALANCE_LIMIT_MINOR)) for _ in range(4)))
            cases.append((normal, before, delta))
    return cases


CASES = _cases()


def _plus(totals: Totals, delta: Totals) -> Totals:
    return Totals(*(a + b for a, b in zip(vars(totals).values(), vars(delta).values(), strict=True)))


def _function_source(connection: Connection, name: str) -> str:
    """The one body of `name` that holds its rules. An older signature kept for the release
    before (migration 0036 keeps `paycore_payments_accept`'s 0027 signature) may only hand its
    call on to the same name, so that no second copy of a rule can hide in an overload."""
    sources = [
        str(row[0])
        for row in connection.execute(text("SELECT prosrc FROM pg_proc WHERE proname = :name"), {"name": name})
    ]
    delegating = re.compile(rf"\s*SELECT {name}\([^;]*\)\s*;?\s*")
    bodies = [source for source in sources if not delegating.fullmatch(source)]
    assert len(bodies) == 1, f"{name}: {len(bodies)} functions with a body of their own, of {len(sources)}"
    return bodies[0]


def _constant(source: str, name: str) -> int:
    found = re.findall(rf"\b{name} constant \w+ := (\d+);", source)
    assert len(found) == 1, (name, found)
    return int(found[0])


def _condition_before(source: str, message: str) -> str:
    """The condition of the IF whose RAISE carries `message`, whitespace collapsed."""
    found = re.findall(
        rf"\bIF ((?:(?!\bIF\b|\bTHEN\b).)+) THEN\s+RAISE EXCEPTION '{re.escape(message)}'", source, re.DOTALL
    )
    assert len(found) == 1, (message, found)
    return " ".join(found[0].split())


def _substitute(condition: str, names: dict[str, str]) -> str:
    for name, replacement in names.items():
        condition, count = re.subn(rf"(?<![\w.]){re.escape(name)}(?![\w])", replacement, condition)
        assert count > 0, (name, condition)
    assert "p_" not in condition and "figures_" not in condition, condition
    return condition


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_functions_bounds_are_the_rules(database: Database) -> None:
    with database.read() as connection:
        source = _function_source(connection, "paycore_create_transfer")
    assert _constant(source, "total_max") == TOTAL_MINOR_MAX
    assert _constant(source, "balance_max") == BALANCE_LIMIT_MINOR
    # Bound 1 before the addition: each total against its own delta, `bound_before_adding`'s
    # `total_max - delta` for the deltas >= 0 the function receives.
    pairs = re.findall(r"\b(\w+)_minor <= total_max - p_(\w+)\[i\]", source)
    assert sorted(pairs) == sorted((name, name) for name in _TOTAL_NAMES)
    assert all(bound_before_adding(delta) == TOTAL_MINOR_MAX - delta for delta in (0, 1, BALANCE_LIMIT_MINOR))


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_moves_bounds_are_the_rules(database: Database) -> None:
    """`paycore_ledger_move` (migration 0055: a hold's post or void, a reversal) takes deltas of
    either sign (a hold released): each total against its own delta where it grows, the whole
    range where it does not, as `bound_before_adding` bounds it."""
    with database.read() as connection:
        source = _function_source(connection, "paycore_ledger_move")
    assert _constant(source, "total_max") == TOTAL_MINOR_MAX
    assert _constant(source, "balance_max") == BALANCE_LIMIT_MINOR
    pairs = re.findall(r"\b(\w+)_minor <= total_max - greatest\(p_(\w+)\[i\], 0\)", source)
    assert sorted(pairs) == sorted((name, name) for name in _TOTAL_NAMES)
    for delta in (-BALANCE_LIMIT_MINOR, -1, 0, 1, BALANCE_LIMIT_MINOR):
        assert bound_before_adding(delta) == TOTAL_MINOR_MAX - max(delta, 0)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_functions_figures_are_the_rules(database: Database) -> None:
    with database.read() as connection:
        for normal, before, delta in CASES:
            for totals in (before, _plus(before, delta)):
                row = connection.execute(
                    text("SELECT paycore_balance_figures(:n, :dp, :cp, :dq, :cq)"), _params(normal, totals)
                ).one()
                assert [int(value) for value in row[0]] == list(limited_figures(totals, normal).values()), (
                    normal,
                    totals,
                )


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("function", ["paycore_payments_accept", "paycore_payouts_create", "paycore_refunds_create"])
def test_a_holds_bounds_are_the_rules(database: Database, function: str) -> None:
    """`paycore_payments_accept` (migration 0027), `paycore_payouts_create` (a payout's
    creation) and `paycore_refunds_create` (a refund's creating phase) move pending totals
    only: each against its own delta, as `bound_before_adding` bounds it."""
    with database.read() as connection:
        source = _function_source(connection, function)
    assert _constant(source, "total_max") == TOTAL_MINOR_MAX
    assert _constant(source, "balance_max") == BALANCE_LIMIT_MINOR
    pairs = re.findall(r"\b(\w+)_minor <= total_max - delta_(\w+)", source)
    assert sorted(pairs) == [("credits_pending", "credit"), ("debits_pending", "debit")]


# Each function that copies the rule, and how its overdraft condition names the account's
# guard and normal balance.
_COPIES = {
    "paycore_create_transfer": {"p_guard[i]": ":n"},
    "paycore_ledger_move": {"p_guard[i]": ":n"},  # migration 0055: a hold's post or void, a reversal
    "paycore_payments_accept": {"account.no_overdraft": "true", "account.normal_balance": ":n"},
    # `guarded`: the account's flag, or the payout's source (the hold's guard)
    "paycore_payouts_create": {"guarded": "true", "account.normal_balance": ":n"},
    "paycore_refunds_create": {"account.no_overdraft": "true", "account.normal_balance": ":n"},
}


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("function", sorted(_COPIES))
def test_the_function_refuses_past_the_limit_what_the_rule_refuses(database: Database, function: str) -> None:
    with database.read() as connection:
        source = _function_source(connection, function)
        balance_max = _constant(source, "balance_max")
        condition = _substitute(
            _condition_before(source, "account % would pass the balance limit"),
            {"figures_after[k]": "f.after", "figures_before[k]": "f.before", "balance_max": f"{balance_max}::numeric"},
        )
        statement = text(
            f"SELECT coalesce(bool_or({condition}), false) FROM unnest("
            "paycore_balance_figures(:n, :dp + :ddp, :cp + :dcp, :dq + :ddq, :cq + :dcq),"
            " paycore_balance_figures(:n, :dp, :cp, :dq, :cq)) AS f(after, before)"
        )
        for normal, before, delta in CASES:
            deltas = dict(zip(("ddp", "dcp", "ddq", "dcq"), vars(delta).values(), strict=True))
            refused = connection.execute(statement, {**_params(normal, before), **deltas}).scalar_one()
            expected = grows_past(before, _plus(before, delta), normal) is not None
            assert refused is expected, (normal, before, delta)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("function", sorted(_COPIES))
def test_the_function_refuses_an_overdraft_as_the_rule_does(database: Database, function: str) -> None:
    with database.read() as connection:
        source = _function_source(connection, function)
        names = _COPIES[function] | {name: f"CAST(:{key} AS numeric)" for name, key in _KEYS.items()}
        condition = _substitute(_condition_before(source, "account % has insufficient available funds"), names)
        statement = text(f"SELECT {condition}")
        for normal, before, delta in CASES:
            after = _plus(before, delta)
            assert connection.execute(statement, _params(normal, after)).scalar_one() is breaks_no_overdraft(
                after, normal
            ), (normal, after)


_KEYS = dict(zip(_TOTAL_NAMES, ("dp", "cp", "dq", "cq"), strict=True))


def _params(normal: str, totals: Totals) -> dict[str, Any]:
    return {"n": normal, **dict(zip(_KEYS.values(), vars(totals).values(), strict=True))}


@pytest.mark.parametrize("grows", [0, 1, 2, 3])
def test_apply_totals_stops_each_total_at_the_rules_range(database: Database, grows: int) -> None:
    """`_APPLY_TOTALS` adds up to the bound of `paycore.ledger.limits` and not one minor unit
    past it, on both databases; a total that shrinks is never stopped."""
    column = f"{_TOTAL_NAMES[grows]}_minor"
    near = TOTAL_MINOR_MAX - 5

    def attempt(delta_minor: int) -> Any:
        def work(connection: Connection) -> Any:
            account = ledger.create_account(
                connection, "t_limits", code=f"a{delta_minor}.{grows}", currency="USD", normal_balance="credit",
                no_overdraft=False, metadata={}, now_us=now_us(),
            )  # fmt: skip
            connection.execute(
                text(f"UPDATE ledger_accounts SET {column} = :near WHERE tenant_id = 't_limits' AND id = :id"),
                {"near": near, "id": account.id},
            )
            delta = Totals(*(delta_minor if index == grows else 0 for index in range(4)))
            return repository.apply_totals(connection, "t_limits", account.id, delta, 1, TOTAL_MINOR_MAX)

        return database.transaction(work)

    for delta_minor in (-3, 0, 4, 5, 6, 7):
        applied = attempt(delta_minor)
        within = near <= bound_before_adding(delta_minor)
        assert (applied is not None) is within, delta_minor
        if applied is not None:
            assert vars(applied[0])[column] == near + delta_minor


def test_the_invariant_check_reports_past_the_rules_limit() -> None:
    """`balance_over_max` (invariants) is one more copy: its bound is the rule's limit, and no
    other large number stands in its SQL."""
    [check] = [check for check in CHECKS if check.name == "balance_over_max"]
    numbers = {int(number) for number in re.findall(r"\d{6,}", check.sql)}
    assert numbers == {BALANCE_LIMIT_MINOR}, numbers
    for figure in ("posted", "pending", "available"):
        assert f"{figure} > {BALANCE_LIMIT_MINOR}" in check.sql
        assert f"{figure} < -{BALANCE_LIMIT_MINOR}" in check.sql
