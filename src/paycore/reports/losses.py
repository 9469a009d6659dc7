"""The payout loss report (SPEC §11; the definition and worked examples: docs/losses.md).

A payout's loss over [from, to] (on `payout_adjustments.effective_on`, the day the money
moved), in its currency:

    loss_minor = fees + return_fees + chargebacks + return_shortfall
               - fee_reversals - chargeback_reversals - recoveries - refunds

where return_shortfall = payout.amount_minor - return.amount_minor for each `return` row
(what the bank sent back short of the amount; the returned principal is not a loss).
Listed: each payout with an adjustment in range and a loss other than 0, by loss (highest
first), then payout id, then tenant id (a total order: keyset pagination needs one).

The report is ONE SQL statement (REPORT_SQL), the same text on SQLite and PostgreSQL. It
ranks every payout of the range on one signed sum per payout (`losses`: the adjustments in
range summed per payout from a covering index, joined to their payouts), cuts the page after
the cursor (`page`), sums each component again for the page's rows only, and appends one
`total` line per currency over the whole filtered set. A cursor (`starting_after`) is a
payout id: the statement computes that payout's loss over the same range (`after_row`) and
returns its row first; the caller checks that it came back (a pair check) and drops it.

Money stays integer: SUM over BIGINT is NUMERIC on PostgreSQL, converted to int exactly
(`exact_int`); nothing is divided or cast to a fractional type.
"""

from __future__ import annotations

import datetime as dt
import re
import textwrap
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import Connection, text

from paycore.kit.errors import InvalidRequest, UnsupportedCurrency
from paycore.kit.money import is_known_currency
from paycore.payouts import service as payouts
from paycore.reports import dispute_losses
from paycore.reports.dispute_losses import DisputeTotal
from paycore.reports.errors import InvalidDate, InvalidDateRange, InvalidStartingAfter

PAGE_ROWS_MAX: Final = 100  # one API page
EXPORT_PAGE_ROWS_MAX: Final = 50_000  # one page of `paycore report losses`: what memory holds at once
RAILS: Final = ("ach", "sepa")
# Adjustment days are YYYY-MM-DD strings: these bound every day there is, so "all time" is a
# range like any other and the statement never changes shape.
FIRST_DAY: Final = "0001-01-01"
LAST_DAY: Final = "9999-12-31"
_DAY_PATTERN: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_PAYOUT_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")

# Every payout's loss over the range, on ONE signed sum per payout (two aggregates per
# adjustment, not nine: this part reads every adjustment in range). A return counts -amount
# here and +payout.amount_minor once per return row: its shortfall. The per-payout sums are
# cast back to BIGINT (exact: a payout has a handful of adjustments of at most 2^53 - 1 each;
# an overflow would be an error, never a wrong number), so ranking a million payouts compares
# 64-bit integers, not NUMERIC. `{name}` names the CTE pair; `{match}` adds conditions beyond
# the range (tenant, or the cursor's payout). `p.rail = :rail OR :rail IS NULL` in this
# order: PostgreSQL types a parameter where it first meets it, and `:rail IS NULL` alone
# says nothing of its type.
# The eight components of a loss, summed over a payout's adjustments (docs/losses.md): the
# report's columns, and the console's charts by day (`reports/charts.py`), from this one text.
COMPONENT_SUMS: Final = """\
SUM(CASE WHEN a.kind = 'fee' THEN a.amount_minor ELSE 0 END) AS fees_minor,
SUM(CASE WHEN a.kind = 'return_fee' THEN a.amount_minor ELSE 0 END) AS return_fees_minor,
SUM(CASE WHEN a.kind = 'chargeback' THEN a.amount_minor ELSE 0 END) AS chargebacks_minor,
SUM(CASE WHEN a.kind = 'return' THEN p.amount_minor - a.amount_minor ELSE 0 END) AS return_shortfall_minor,
SUM(CASE WHEN a.kind = 'fee_reversal' THEN a.amount_minor ELSE 0 END) AS fee_reversals_minor,
SUM(CASE WHEN a.kind = 'chargeback_reversal' THEN a.amount_minor ELSE 0 END) AS chargeback_reversals_minor,
SUM(CASE WHEN a.kind = 'recovery' THEN a.amount_minor ELSE 0 END) AS recoveries_minor,
SUM(CASE WHEN a.kind = 'refund' THEN a.amount_minor ELSE 0 END) AS refunds_minor"""
_LOSSES_CTES: Final = """\
{name}_adjusted AS (
    SELECT
        a.tenant_id,
        a.payout_id,
        CAST(SUM(CASE WHEN a.kind IN ('fee', 'return_fee', 'chargeback') THEN a.amount_minor ELSE -a.amount_minor END)
            AS BIGINT) AS signed_minor,
        CAST(SUM(CASE WHEN a.kind = 'return' THEN 1 ELSE 0 END) AS BIGINT) AS return_count
    FROM payout_adjustments AS a
    WHERE a.effective_on >= :from_day
        AND a.effective_on <= :to_day{match}
    GROUP BY a.tenant_id, a.payout_id
),
{name} AS (
    SELECT
        p.tenant_id,
        p.id AS payout_id,
        p.currency,
        x.signed_minor + x.return_count * p.amount_minor AS loss_minor
    FROM {name}_adjusted AS x
    JOIN payouts AS p ON p.tenant_id = x.tenant_id AND p.id = x.payout_id
    WHERE (p.rail = :rail OR :rail IS NULL)
        AND (p.currency = :currency OR :currency IS NULL)
)"""
TENANT_MATCH: Final = "\n        AND a.tenant_id = :tenant_id"
_AFTER_MATCH: Final = "\n        AND a.tenant_id = :after_tenant_id\n        AND a.payout_id = :after_payout_id"
# The page: the cursor's own row and the rows after it, cut to :row_limit (`losses` carries
# only what ranking and totals need: it is materialized, being read twice); each of its rows
# with its payout's columns and its components, summed again for these rows only (the index
# on (tenant_id, payout_id, effective_on)); then one `total` line per currency over every
# row, whatever the page.
_REPORT_TAIL: Final = """,
page AS (
    SELECT l.tenant_id, l.payout_id, l.loss_minor
    FROM losses AS l
    WHERE l.loss_minor <> 0
        AND (
            :after_payout_id IS NULL
            OR l.loss_minor < (SELECT c.loss_minor FROM after_row AS c)
            OR (l.loss_minor = (SELECT c.loss_minor FROM after_row AS c) AND l.payout_id > :after_payout_id)
            OR (
                l.loss_minor = (SELECT c.loss_minor FROM after_row AS c)
                AND l.payout_id = :after_payout_id
                AND l.tenant_id >= :after_tenant_id
            )
        )
    ORDER BY l.loss_minor DESC, l.payout_id, l.tenant_id
    LIMIT :row_limit
)
SELECT
    'row' AS line,
    p.id AS payout_id,
    p.tenant_id AS tenant_id,
    p.rail AS rail,
    p.currency AS currency,
    p.amount_minor AS amount_minor,
    p.status AS status,
    {component_sums},
    page.loss_minor AS loss_minor,
    NULL AS payouts
FROM page
JOIN payouts AS p ON p.tenant_id = page.tenant_id AND p.id = page.payout_id
JOIN payout_adjustments AS a
    ON a.tenant_id = page.tenant_id
    AND a.payout_id = page.payout_id
    AND a.effective_on >= :from_day
    AND a.effective_on <= :to_day
GROUP BY p.id, p.tenant_id, p.rail, p.currency, p.amount_minor, p.status, page.loss_minor
UNION ALL
SELECT 'total', NULL, NULL, NULL, l.currency, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    SUM(l.loss_minor), COUNT(*)
FROM losses AS l
WHERE l.loss_minor <> 0
GROUP BY l.currency
ORDER BY line, loss_minor DESC, payout_id, tenant_id, currency"""
COLUMNS: Final = (
    "payout_id",
    "tenant_id",
    "rail",
    "currency",
    "amount_minor",
    "status",
    "fees_minor",
    "return_fees_minor",
    "chargebacks_minor",
    "return_shortfall_minor",
    "fee_reversals_minor",
    "chargeback_reversals_minor",
    "recoveries_minor",
    "refunds_minor",
    "loss_minor",
)


def _report_sql(match: str) -> str:
    ctes = [_LOSSES_CTES.format(name="losses", match=match), _LOSSES_CTES.format(name="after_row", match=_AFTER_MATCH)]
    tail = _REPORT_TAIL.replace("{component_sums}", textwrap.indent(COMPONENT_SUMS, "    ").lstrip())
    return "WITH\n" + ",\n".join(ctes) + tail


# The statement of docs/losses.md (tests/integration/reports/test_docs.py keeps the two equal).
REPORT_SQL: Final = _report_sql(TENANT_MATCH)
# The operator's form (`paycore report losses` without --tenant): the same without the tenant line.
REPORT_SQL_ALL_TENANTS: Final = _report_sql("")
_STATEMENTS: Final = {True: text(REPORT_SQL), False: text(REPORT_SQL_ALL_TENANTS)}


@dataclass(frozen=True)
class LossFilters:
    tenant_id: str | None  # None: every tenant (the operator's CLI only)
    from_day: str | None = None  # YYYY-MM-DD, inclusive; None: from the first day
    to_day: str | None = None  # YYYY-MM-DD, inclusive; None: to the last day
    rail: str | None = None
    currency: str | None = None


@dataclass(frozen=True)
class Cursor:
    tenant_id: str
    payout_id: str


@dataclass(frozen=True)
class LossRow:
    payout_id: str
    tenant_id: str
    rail: str
    currency: str
    amount_minor: int
    status: str  # the public name
    fees_minor: int
    return_fees_minor: int
    chargebacks_minor: int
    return_shortfall_minor: int
    fee_reversals_minor: int
    chargeback_reversals_minor: int
    recoveries_minor: int
    refunds_minor: int
    loss_minor: int

    @property
    def cursor(self) -> Cursor:
        return Cursor(self.tenant_id, self.payout_id)


@dataclass(frozen=True)
class CurrencyTotal:
    currency: str
    loss_minor: int
    payouts: int


@dataclass(frozen=True)
class LossReport:
    rows: list[LossRow]  # one page
    has_more: bool
    totals: list[CurrencyTotal]  # every page's rows, by currency code
    # Chargebacks on payments (docs/losses.md, "Disputes on payments"): lost amounts and fees
    # in the range, by currency code; none under a `rail` filter (a card payment has no rail).
    dispute_totals: list[DisputeTotal]


def parse_filters(
    tenant_id: str | None,
    *,
    from_day: str | None = None,
    to_day: str | None = None,
    rail: str | None = None,
    currency: str | None = None,
) -> LossFilters:
    """The filters, checked: each refusal is a 400 with its own code and param."""
    first = _day(from_day, "from")
    last = _day(to_day, "to")
    if first is not None and last is not None and first > last:
        raise InvalidDateRange(f"from ({first}) is after to ({last})", param="from")
    if rail is not None and rail not in RAILS:
        raise InvalidRequest(f"rail must be one of {', '.join(RAILS)}", param="rail")
    if currency is not None and not is_known_currency(currency):
        raise UnsupportedCurrency("currency must be an ISO 4217 code paycore knows, e.g. USD", param="currency")
    return LossFilters(tenant_id, first, last, rail, currency)


def _day(raw: str | None, param: str) -> str | None:
    if raw is None:
        return None
    try:
        if _DAY_PATTERN.fullmatch(raw) is None:
            raise ValueError(raw)
        return dt.date.fromisoformat(raw).isoformat()
    except ValueError as error:
        raise InvalidDate(f"{param} must be a date YYYY-MM-DD (UTC)", param=param) from error


def check_starting_after(raw: str | None) -> str | None:
    if raw is not None and _PAYOUT_ID_PATTERN.fullmatch(raw) is None:
        raise InvalidStartingAfter("starting_after must be a payout id from this report", param="starting_after")
    return raw


def begin_report(connection: Connection) -> None:
    """Call first in the report's read transaction, so every page of an export comes from one
    snapshot. PostgreSQL: REPEATABLE READ (it must be the transaction's first statement: it
    raises otherwise, a programmer's error), and no parallel workers: the parallel plan has
    every worker aggregate the whole range again for its own hash table, measured 1.5x
    slower on 2 cores (docs/benchmarks.md, "Loss report"). SQLite: a read transaction sees one
    snapshot already."""
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        connection.exec_driver_sql("SET LOCAL max_parallel_workers_per_gather = 0")


def report(connection: Connection, filters: LossFilters, *, after: Cursor | None, limit: int) -> LossReport:
    """Up to `limit` rows strictly after `after` (loss desc, payout id, tenant id), and the
    totals of the whole filtered set: one statement."""
    assert 1 <= limit <= EXPORT_PAGE_ROWS_MAX, limit
    assert after is None or filters.tenant_id in (None, after.tenant_id), "a cursor stays in its tenant"
    extra = 1 if after is None else 2  # one more to know has_more; and the cursor's own row
    parameters = {
        "tenant_id": filters.tenant_id,
        "from_day": filters.from_day or FIRST_DAY,
        "to_day": filters.to_day or LAST_DAY,
        "rail": filters.rail,
        "currency": filters.currency,
        "after_tenant_id": None if after is None else after.tenant_id,
        "after_payout_id": None if after is None else after.payout_id,
        "row_limit": limit + extra,
    }
    rows, totals = [], []
    for found in connection.execute(_STATEMENTS[filters.tenant_id is not None], parameters):
        if found.line == "row":
            rows.append(_row(found))
        else:
            totals.append(CurrencyTotal(found.currency, exact_int(found.loss_minor), exact_int(found.payouts)))
    if after is not None:
        if not rows or rows[0].cursor != after:
            raise InvalidStartingAfter(
                "starting_after is not a payout of this report (same dates and filters)", param="starting_after"
            )
        rows = rows[1:]
    totals.sort(key=lambda total: total.currency)
    disputed = _dispute_totals(connection, filters)
    return LossReport(rows=rows[:limit], has_more=len(rows) > limit, totals=totals, dispute_totals=disputed)


def _dispute_totals(connection: Connection, filters: LossFilters) -> list[DisputeTotal]:
    if filters.rail is not None:
        return []
    first, last = filters.from_day or FIRST_DAY, filters.to_day or LAST_DAY
    return dispute_losses.totals(
        connection, tenant_id=filters.tenant_id, from_day=first, to_day=last, currency=filters.currency
    )


def _row(found: Any) -> LossRow:
    values: dict[str, Any] = {column: getattr(found, column) for column in COLUMNS}
    for column in COLUMNS[4:]:
        if column != "status":
            values[column] = exact_int(values[column])
    values["status"] = payouts.public_status(values["status"])
    row = LossRow(**values)
    # Pair check of the statement: the signed sum it ranked on is the sum of the components
    # it summed again, and no return came back above the payout's amount.
    components = (row.fees_minor, row.return_fees_minor, row.chargebacks_minor, row.return_shortfall_minor)
    reductions = (row.fee_reversals_minor, row.chargeback_reversals_minor, row.recoveries_minor, row.refunds_minor)
    assert row.loss_minor == sum(components) - sum(reductions), row
    assert row.return_shortfall_minor >= 0, row
    return row


def exact_int(value: object) -> int:
    """An integer from the database, exactly: int on SQLite, int or NUMERIC (Decimal) on
    PostgreSQL. Never a float: one here is a programmer's error."""
    if type(value) is int:
        return value
    assert isinstance(value, Decimal), f"money must come back as an integer, not {type(value).__name__}"
    integral = value.to_integral_value()
    assert value == integral, f"a fractional amount of minor units: {value}"
    return int(integral)


def totals(connection: Connection, *, tenant_id: str | None, from_day: str | None = None) -> dict[str, int]:
    """The loss of every payout with an adjustment since `from_day`, and of the chargebacks on
    payments (fees and lost amounts) since then, by currency (the report's `total` lines and
    its dispute totals), of one tenant or every one."""
    found = report(connection, parse_filters(tenant_id, from_day=from_day), after=None, limit=1)
    summed = {total.currency: total.loss_minor for total in found.totals}
    for disputed in found.dispute_totals:
        summed[disputed.currency] = summed.get(disputed.currency, 0) + disputed.loss_minor
    return summed
