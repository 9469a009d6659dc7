"""SPEC §11 loss report, at the service (`paycore.reports.losses`), on SQLite and PostgreSQL:
the fixture set of world.py against the losses worked out by hand in expected.py."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from paycore.db.engine import Database
from paycore.ledger import service as ledger
from paycore.reports import losses
from paycore.reports.errors import InvalidDate, InvalidDateRange, InvalidStartingAfter
from paycore.reports.losses import Cursor, LossFilters
from tests.integration.reports import expected
from tests.integration.reports.expected import with_ids


def report(
    database: Database, filters: LossFilters, *, after: Cursor | None = None, limit: int = 100
) -> tuple[list[dict[str, Any]], bool, list[dict[str, Any]]]:
    with database.read() as connection:
        losses.begin_report(connection)
        found = losses.report(connection, filters, after=after, limit=limit)
    for row in found.rows:
        assert all(type(value) is int for name, value in asdict(row).items() if name.endswith("_minor"))
    return [asdict(row) for row in found.rows], found.has_more, [asdict(total) for total in found.totals]


def acme(**filters: str) -> LossFilters:
    return losses.parse_filters("acme", **filters)


def test_all_time_matches_the_losses_worked_out_by_hand(database: Database, ids: dict[str, str]) -> None:
    rows, has_more, totals = report(database, acme())
    assert rows == with_ids(expected.ALL_TIME, ids)
    assert not has_more
    assert totals == expected.ALL_TIME_TOTALS
    assert ids["sepa_short"] < ids["sepa_refund"] and ids["fee_only_1"] < ids["fee_only_2"]  # the ties' order


@pytest.mark.parametrize(
    ("first", "last", "rows", "totals"),
    [
        ("2026-01-01", "2026-01-31", expected.JANUARY, expected.JANUARY_TOTALS),
        ("2026-02-01", "2026-02-28", expected.FEBRUARY, expected.FEBRUARY_TOTALS),
        ("2026-02-05", "2026-02-10", expected.FEBRUARY_5_TO_10, None),
        ("2026-03-01", "2026-03-31", expected.MARCH, [{"currency": "EUR", "loss_minor": -400, "payouts": 1}]),
        ("2026-01-07", "2026-01-07", expected.JANUARY_7, [{"currency": "USD", "loss_minor": 200, "payouts": 1}]),
        ("2025-01-01", "2025-12-31", [], []),
    ],
)
def test_a_date_range_counts_the_adjustments_effective_in_it(
    database: Database,
    ids: dict[str, str],
    first: str,
    last: str,
    rows: list[dict[str, Any]],
    totals: list[dict[str, Any]] | None,
) -> None:
    found, has_more, found_totals = report(database, acme(from_day=first, to_day=last))
    assert found == with_ids(rows, ids)
    assert not has_more
    if totals is not None:
        assert found_totals == totals


def test_open_ended_ranges(database: Database, ids: dict[str, str]) -> None:
    since_february, _, _ = report(database, acme(from_day="2026-02-01"))
    assert since_february == with_ids([*expected.FEBRUARY[:1], *expected.MARCH, *expected.FEBRUARY[1:]], ids)
    until_january, _, totals = report(database, acme(to_day="2026-01-31"))
    assert until_january == with_ids(expected.JANUARY, ids)
    assert totals == expected.JANUARY_TOTALS


def test_rail_and_currency_filters(database: Database, ids: dict[str, str]) -> None:
    sepa, _, sepa_totals = report(database, acme(rail="sepa"))
    assert sepa == with_ids([expected.ALL_TIME[1], expected.ALL_TIME[2]], ids)
    assert sepa_totals == [{"currency": "EUR", "loss_minor": 1_240, "payouts": 2}]
    usd, _, usd_totals = report(database, acme(currency="USD"))
    assert usd == with_ids([expected.ALL_TIME[0], *expected.ALL_TIME[3:]], ids)
    assert usd_totals == [{"currency": "USD", "loss_minor": 5_300, "payouts": 4}]
    ach_january, _, _ = report(database, acme(rail="ach", from_day="2026-01-01", to_day="2026-01-31"))
    assert [row["payout_id"] for row in ach_january] == [
        ids[name] for name in ("charged_back", "ach_returned", "fee_reversed", "fee_only_1", "fee_only_2")
    ]
    assert report(database, acme(rail="sepa", currency="USD")) == ([], False, [])


@pytest.mark.parametrize("limit", [1, 2, 4])
def test_pages_follow_each_other_across_ties(database: Database, ids: dict[str, str], limit: int) -> None:
    for filters, rows in (
        (acme(), expected.ALL_TIME),
        (acme(from_day="2026-01-01", to_day="2026-01-31"), expected.JANUARY),
    ):
        seen: list[dict[str, Any]] = []
        after = None
        for _ in range(len(rows) + 1):
            page, has_more, totals = report(database, filters, after=after, limit=limit)
            assert len(page) == min(limit, len(rows) - len(seen))
            seen += page
            assert totals == report(database, filters)[2]  # every page carries the totals of all
            if not has_more:
                break
            after = Cursor("acme", page[-1]["payout_id"])
        assert seen == with_ids(rows, ids)


def test_the_last_page_after_the_last_row_is_empty(database: Database, ids: dict[str, str]) -> None:
    assert report(database, acme(), after=Cursor("acme", ids["fee_only_2"]))[:2] == ([], False)


@pytest.mark.parametrize(
    ("tenant", "name", "filters"),
    [
        ("acme", "fee_reversed", {}),  # a loss of 0 over all time: not a row of this report
        ("acme", "chargeback_won", {"from_day": "2026-02-01", "to_day": "2026-02-28"}),  # 0 in February
        ("acme", "charged_back", {"rail": "sepa"}),  # filtered out
        ("acme", "canceled", {}),  # no adjustment at all
        ("acme", "globex", {}),  # another tenant's payout
        ("acme", None, {}),  # no such payout
    ],
)
def test_a_cursor_must_be_a_row_of_the_same_report(
    database: Database, ids: dict[str, str], tenant: str, name: str | None, filters: dict[str, str]
) -> None:
    after = Cursor(tenant, ids[name] if name else "po_NOSUCHPAYOUT")
    with pytest.raises(InvalidStartingAfter) as refused, database.read() as connection:
        losses.report(connection, losses.parse_filters(tenant, **filters), after=after, limit=10)
    assert refused.value.param == "starting_after"


def test_tenants_see_their_own_payouts_only(database: Database, ids: dict[str, str]) -> None:
    rows, _, totals = report(database, losses.parse_filters("globex"))
    assert rows == with_ids(expected.GLOBEX, ids)
    assert totals == [{"currency": "USD", "loss_minor": 1_025, "payouts": 1}]
    assert report(database, losses.parse_filters("initech")) == ([], False, [])
    everyone, _, everyone_totals = report(database, losses.parse_filters(None))
    assert everyone == with_ids(expected.EVERY_TENANT, ids)
    assert everyone_totals == [
        {"currency": "EUR", "loss_minor": 1_240, "payouts": 2},
        {"currency": "USD", "loss_minor": 6_325, "payouts": 5},
    ]


def test_every_tenant_pages_by_loss_then_payout_then_tenant(database: Database, ids: dict[str, str]) -> None:
    everyone = losses.parse_filters(None)
    seen: list[dict[str, Any]] = []
    after = None
    for _ in range(len(expected.EVERY_TENANT)):
        page, has_more, _ = report(database, everyone, after=after, limit=2)
        seen += page
        if not has_more:
            break
        after = Cursor(page[-1]["tenant_id"], page[-1]["payout_id"])
    assert seen == with_ids(expected.EVERY_TENANT, ids)


def test_over_all_time_the_report_is_the_ledgers_fees_and_losses(database: Database, ids: dict[str, str]) -> None:
    """docs/losses.md: per tenant and currency, the sum of loss_minor over all time equals the
    balance of payouts.fees.CUR + payouts.losses.CUR."""
    assert ids
    for (tenant, currency), balances in expected.LEDGER.items():
        with database.read() as connection:
            found = {
                prefix: ledger.find_account_by_code(connection, tenant, f"{prefix}.{currency}")
                for prefix in ("payouts.fees", "payouts.losses")
            }
            totals = losses.report(
                connection, losses.parse_filters(tenant, currency=currency), after=None, limit=1
            ).totals
        posted = {prefix: account.balance.posted_minor for prefix, account in found.items() if account is not None}
        assert posted == balances, (tenant, currency)
        assert [total.loss_minor for total in totals] == [sum(balances.values())], (tenant, currency)


@pytest.mark.parametrize(
    ("filters", "error", "param"),
    [
        ({"from_day": "2026-13-01"}, InvalidDate, "from"),
        ({"from_day": "2026-02-30"}, InvalidDate, "from"),
        ({"to_day": "20260101"}, InvalidDate, "to"),
        ({"to_day": "2026-1-01"}, InvalidDate, "to"),
        ({"to_day": "\uff12\uff10\uff12\uff16-01-01"}, InvalidDate, "to"),
        ({"to_day": ""}, InvalidDate, "to"),
        ({"from_day": "2026-02-01", "to_day": "2026-01-31"}, InvalidDateRange, "from"),
    ],
)
def test_bad_dates_are_refused(filters: dict[str, str], error: type[Exception], param: str) -> None:
    with pytest.raises(error) as refused:
        losses.parse_filters("acme", **filters)
    assert getattr(refused.value, "param", None) == param


def test_money_from_the_database_is_an_exact_integer() -> None:
    from decimal import Decimal

    assert losses.exact_int(Decimal("12345678901234567890123")) == 12345678901234567890123
    assert losses.exact_int(-25) == -25
    with pytest.raises(AssertionError):
        losses.exact_int(Decimal("1.5"))
    with pytest.raises(AssertionError):
        losses.exact_int(1.0)
