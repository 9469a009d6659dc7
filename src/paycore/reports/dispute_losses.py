"""The loss report's disputes (SPEC §6.2; the definition: docs/losses.md,
"Disputes on payments"): what chargebacks on card payments cost, per currency.

Over a range of days [from, to] (UTC), in the dispute's currency, for each dispute whose
chargeback was withdrawn (`withdrawn_minor > 0`; an inquiry that stayed one moves no money):

    dispute_fees_minor     = withdrawn_minor - amount_minor   the fee the processor took, dated
                             by the day of the withdrawal's ledger transfer. A won dispute does
                             not return it: the sandbox keeps it, as most networks do, and
                             paycore reinstates the amount only (`disputes/money.py`).
    lost_chargebacks_minor = amount_minor                     when the dispute is `lost`, dated
                             by the day it became lost (`updated_at_us`: `lost` is final, the
                             transition table never moves it again)
    loss_minor             = dispute_fees_minor + lost_chargebacks_minor

An open dispute's amount is no loss yet (it may be won); its fee is. ONE statement, the same
text on SQLite and PostgreSQL, over the tenant's withdrawn disputes (a dispute is rare beside
the payments: the statement reads the tenant's disputes through `ix_disputes_status`, and each
withdrawal's transfer by its primary key). Money stays integer: SUM over BIGINT comes back as
int or an integral NUMERIC, converted exactly.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from sqlalchemy import Connection, text

from paycore.kit.clock import DAY_US, day_start_us

# `{match}`: the tenant's line, or nothing for the operator's all-tenant form (as REPORT_SQL).
_DISPUTE_TOTALS_SQL: Final = """\
SELECT
    d.currency AS currency,
    SUM(CASE WHEN t.created_at_us >= :from_us AND t.created_at_us < :to_us
        THEN d.withdrawn_minor - d.amount_minor ELSE 0 END) AS dispute_fees_minor,
    SUM(CASE WHEN d.status = 'lost' AND d.updated_at_us >= :from_us AND d.updated_at_us < :to_us
        THEN d.amount_minor ELSE 0 END) AS lost_chargebacks_minor,
    SUM(CASE WHEN (t.created_at_us >= :from_us AND t.created_at_us < :to_us)
        OR (d.status = 'lost' AND d.updated_at_us >= :from_us AND d.updated_at_us < :to_us)
        THEN 1 ELSE 0 END) AS disputes,
    MIN(d.reinstated_minor - d.amount_minor * (CASE WHEN d.reinstated_minor > 0 THEN 1 ELSE 0 END))
        AS fee_reinstated_min,
    MAX(d.reinstated_minor - d.amount_minor * (CASE WHEN d.reinstated_minor > 0 THEN 1 ELSE 0 END))
        AS fee_reinstated_max
FROM disputes AS d
JOIN ledger_transfers AS t ON t.tenant_id = d.tenant_id AND t.id = d.withdrawal_transfer_id
WHERE d.withdrawn_minor > 0{match}
    AND (d.currency = :currency OR :currency IS NULL)
GROUP BY d.currency
ORDER BY d.currency"""
TENANT_MATCH: Final = "\n    AND d.tenant_id = :tenant_id"
DISPUTE_TOTALS_SQL: Final = _DISPUTE_TOTALS_SQL.format(match=TENANT_MATCH)  # docs/losses.md shows it
_STATEMENTS: Final = {
    True: text(DISPUTE_TOTALS_SQL),
    False: text(_DISPUTE_TOTALS_SQL.format(match="")),
}


@dataclass(frozen=True)
class DisputeTotal:
    """One currency's dispute losses over the range."""

    currency: str
    dispute_fees_minor: int
    lost_chargebacks_minor: int
    loss_minor: int
    disputes: int  # disputes with a fee or a lost amount in the range


def totals(
    connection: Connection, *, tenant_id: str | None, from_day: str, to_day: str, currency: str | None
) -> list[DisputeTotal]:
    """The currencies with a dispute loss in [from_day, to_day] (both included), by code."""
    parameters = {
        "tenant_id": tenant_id,
        "from_us": day_start_us(dt.date.fromisoformat(from_day)),
        # The end of the last day, excluded (9999-12-31's end is an integer, never a date).
        "to_us": day_start_us(dt.date.fromisoformat(to_day)) + DAY_US,
        "currency": currency,
    }
    found: list[DisputeTotal] = []
    for line in connection.execute(_STATEMENTS[tenant_id is not None], parameters):
        # Pair check of the definition: no dispute had its fee given back (paycore reinstates
        # the amount only), so each one's fee is what was withdrawn beyond the amount.
        assert _exact(line.fee_reinstated_min) == 0 == _exact(line.fee_reinstated_max), line
        fees, lost, count = _exact(line.dispute_fees_minor), _exact(line.lost_chargebacks_minor), _exact(line.disputes)
        assert fees >= 0 and lost >= 0 and count >= 0, line
        if count > 0:
            found.append(DisputeTotal(line.currency, fees, lost, fees + lost, count))
    return found


def _exact(value: object) -> int:
    """An integer from the database, exactly (int on SQLite, int or NUMERIC on PostgreSQL)."""
    if type(value) is int:
        return value
    assert isinstance(value, Decimal) and value == value.to_integral_value(), f"not an integer: {value!r}"
    return int(value)
