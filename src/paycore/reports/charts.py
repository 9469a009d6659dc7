"""The loss report's charts (the console's `/ops/losses`): the adjustments of the
report's range and filters summed by day and currency, each component apart, in one statement
(the definition of a loss and its components: `reports/losses.py`, docs/losses.md)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection, text

from paycore.reports.losses import COLUMNS, COMPONENT_SUMS, FIRST_DAY, LAST_DAY, TENANT_MATCH, LossFilters, exact_int

# The console's charts: the adjustments of the report's range and filters, summed
# by day (`effective_on`) and currency with each component apart: ONE statement, the same
# text on SQLite and PostgreSQL. `shown_days` keeps the latest :day_limit days that have an
# adjustment (a chart has room for so many bars); the `total` lines, one per currency, cover
# every day of the range whatever was cut. A payout's loss summed over the range's days is its
# loss in the report, so the totals' losses are the report's totals (a payout that nets to 0
# adds 0 here, and is absent there).
_BY_DAY_SQL: Final = """\
WITH
by_day AS (
    SELECT
        a.effective_on AS effective_on,
        p.currency AS currency,
        {component_sums}
    FROM payout_adjustments AS a
    JOIN payouts AS p ON p.tenant_id = a.tenant_id AND p.id = a.payout_id
    WHERE a.effective_on >= :from_day
        AND a.effective_on <= :to_day{match}
        AND (p.rail = :rail OR :rail IS NULL)
        AND (p.currency = :currency OR :currency IS NULL)
    GROUP BY a.effective_on, p.currency
),
shown_days AS (
    SELECT DISTINCT d.effective_on FROM by_day AS d ORDER BY d.effective_on DESC LIMIT :day_limit
)
SELECT 'day' AS line, b.effective_on AS effective_on, b.currency AS currency, b.fees_minor,
    b.return_fees_minor, b.chargebacks_minor, b.return_shortfall_minor, b.fee_reversals_minor,
    b.chargeback_reversals_minor, b.recoveries_minor, b.refunds_minor
FROM by_day AS b
JOIN shown_days AS s ON s.effective_on = b.effective_on
UNION ALL
SELECT 'total', NULL, b.currency, SUM(b.fees_minor), SUM(b.return_fees_minor), SUM(b.chargebacks_minor),
    SUM(b.return_shortfall_minor), SUM(b.fee_reversals_minor), SUM(b.chargeback_reversals_minor),
    SUM(b.recoveries_minor), SUM(b.refunds_minor)
FROM by_day AS b
GROUP BY b.currency
ORDER BY line, effective_on, currency"""
_SUMS: Final = textwrap.indent(COMPONENT_SUMS, " " * 8).lstrip()  # the report's components
_BY_DAY_STATEMENTS: Final = {
    True: text(_BY_DAY_SQL.format(match=TENANT_MATCH, component_sums=_SUMS)),
    False: text(_BY_DAY_SQL.format(match="", component_sums=_SUMS)),
}
COMPONENTS: Final = COLUMNS[6:14]  # fees_minor .. refunds_minor, in the definition's order
ADDED: Final = COMPONENTS[:4]  # fees, return fees, chargebacks, return shortfall
SUBTRACTED: Final = COMPONENTS[4:]  # fee reversals, chargeback reversals, recoveries, refunds
CHART_DAYS_MAX: Final = 1_000


@dataclass(frozen=True)
class DayLoss:
    """One day's loss in one currency, by component (`effective_on` None: every day's)."""

    effective_on: str | None
    currency: str
    fees_minor: int
    return_fees_minor: int
    chargebacks_minor: int
    return_shortfall_minor: int
    fee_reversals_minor: int
    chargeback_reversals_minor: int
    recoveries_minor: int
    refunds_minor: int

    @property
    def loss_minor(self) -> int:
        added = self.fees_minor + self.return_fees_minor + self.chargebacks_minor + self.return_shortfall_minor
        taken = self.fee_reversals_minor + self.chargeback_reversals_minor + self.recoveries_minor + self.refunds_minor
        return added - taken


@dataclass(frozen=True)
class LossesByDay:
    days: list[DayLoss]  # by day, then currency: the latest `days_max` days with an adjustment
    totals: list[DayLoss]  # one per currency, over every day of the range
    cut: bool  # older days of the range were left out of `days`


def by_day_and_component(connection: Connection, filters: LossFilters, *, days_max: int) -> LossesByDay:
    """The report's range and filters, summed by day and currency, each component apart (one
    statement); the days with an adjustment only."""
    assert 1 <= days_max <= CHART_DAYS_MAX, days_max
    parameters = {
        "tenant_id": filters.tenant_id,
        "from_day": filters.from_day or FIRST_DAY,
        "to_day": filters.to_day or LAST_DAY,
        "rail": filters.rail,
        "currency": filters.currency,
        "day_limit": days_max + 1,  # one more to know whether days were cut
    }
    days: list[DayLoss] = []
    totals: list[DayLoss] = []
    for found in connection.execute(_BY_DAY_STATEMENTS[filters.tenant_id is not None], parameters):
        values = {name: exact_int(getattr(found, name)) for name in COMPONENTS}
        loss = DayLoss(found.effective_on, found.currency, **values)
        assert loss.return_shortfall_minor >= 0, loss
        (days if found.line == "day" else totals).append(loss)
    shown = sorted({str(loss.effective_on) for loss in days})
    cut = len(shown) > days_max
    if cut:
        days = [loss for loss in days if loss.effective_on != shown[0]]
    return LossesByDay(days=days, totals=sorted(totals, key=lambda total: total.currency), cut=cut)
