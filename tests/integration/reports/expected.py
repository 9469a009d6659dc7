"""The loss report of the fixture set (world.py), worked out by hand: literal integers, one
line per payout, each component as the adjustments say (see the table in world.py).

`row(...)` only spells out a row: every component not named is 0, and loss_minor is written
by hand too (the report checks the components add up to it; these tests check both).
"""

from __future__ import annotations

from typing import Any

_COMPONENTS = (
    "fees_minor",
    "return_fees_minor",
    "chargebacks_minor",
    "return_shortfall_minor",
    "fee_reversals_minor",
    "chargeback_reversals_minor",
    "recoveries_minor",
    "refunds_minor",
)
PAYOUT = {  # name: (tenant, rail, currency, amount_minor, public status)
    "ach_returned": ("acme", "ach", "USD", 10_000, "returned"),
    "sepa_short": ("acme", "sepa", "EUR", 50_000, "returned"),
    "charged_back": ("acme", "ach", "USD", 20_000, "settled"),
    "fee_reversed": ("acme", "ach", "USD", 8_000, "settled"),
    "fee_only_1": ("acme", "ach", "USD", 3_000, "settled"),
    "fee_only_2": ("acme", "ach", "USD", 4_000, "settled"),
    "chargeback_won": ("acme", "sepa", "EUR", 30_000, "settled"),
    "sepa_refund": ("acme", "sepa", "EUR", 40_000, "returned"),
    "globex": ("globex", "ach", "USD", 10_000, "settled"),
}


def row(name: str, loss_minor: int, **components: int) -> dict[str, Any]:
    assert set(components) <= set(_COMPONENTS), components
    tenant_id, rail, currency, amount_minor, status = PAYOUT[name]
    values: dict[str, Any] = {"name": name, "tenant_id": tenant_id, "rail": rail, "currency": currency}
    values |= {"amount_minor": amount_minor, "status": status}
    values |= {component: components.get(component, 0) for component in _COMPONENTS}
    values["loss_minor"] = loss_minor
    return values


# Every adjustment ever (tenant acme): highest loss first, ties by payout id (creation order).
# fee_reversed (25 - 25) and chargeback_won (30,000 - 30,000) net to 0: not listed.
ALL_TIME = [
    row("charged_back", 5_025, fees_minor=25, chargebacks_minor=20_000, recoveries_minor=15_000),
    row("sepa_short", 620, fees_minor=20, return_fees_minor=500, return_shortfall_minor=100),
    row("sepa_refund", 620, fees_minor=20, return_shortfall_minor=1_000, refunds_minor=400),
    row("ach_returned", 225, fees_minor=25, return_fees_minor=200),
    row("fee_only_1", 25, fees_minor=25),
    row("fee_only_2", 25, fees_minor=25),
]
ALL_TIME_TOTALS = [
    {"currency": "EUR", "loss_minor": 1_240, "payouts": 2},
    {"currency": "USD", "loss_minor": 5_300, "payouts": 4},
]
JANUARY = [  # 2026-01-01 .. 2026-01-31: the recovery, fee reversal and refund came later
    row("charged_back", 20_025, fees_minor=25, chargebacks_minor=20_000),
    row("sepa_refund", 1_020, fees_minor=20, return_shortfall_minor=1_000),
    row("sepa_short", 620, fees_minor=20, return_fees_minor=500, return_shortfall_minor=100),
    row("ach_returned", 225, fees_minor=25, return_fees_minor=200),
    row("fee_reversed", 25, fees_minor=25),
    row("fee_only_1", 25, fees_minor=25),
    row("fee_only_2", 25, fees_minor=25),
]
JANUARY_TOTALS = [
    {"currency": "EUR", "loss_minor": 1_640, "payouts": 2},
    {"currency": "USD", "loss_minor": 20_325, "payouts": 5},
]
# 2026-02-01 .. 2026-02-28: reductions booked after the loss they reduce are negative rows.
# chargeback_won has two adjustments here (30,000 and its reversal) and a loss of 0: absent.
FEBRUARY = [
    row("fee_reversed", -25, fee_reversals_minor=25),
    row("charged_back", -15_000, recoveries_minor=15_000),
]
FEBRUARY_TOTALS = [{"currency": "USD", "loss_minor": -15_025, "payouts": 2}]
# 2026-02-05 .. 2026-02-10, both ends inclusive: the chargeback (02-05) and the recovery (02-10).
FEBRUARY_5_TO_10 = [
    row("chargeback_won", 30_000, chargebacks_minor=30_000),
    row("charged_back", -15_000, recoveries_minor=15_000),
]
MARCH = [row("sepa_refund", -400, refunds_minor=400)]
# One day, 2026-01-07: the ACH return (all 10,000 back: no shortfall) and its fee.
JANUARY_7 = [row("ach_returned", 200, return_fees_minor=200)]
GLOBEX = [row("globex", 1_025, fees_minor=25, chargebacks_minor=1_000)]
# Every tenant (the operator's CLI): globex's payout takes its place in the order.
EVERY_TENANT = [ALL_TIME[0], GLOBEX[0], *ALL_TIME[1:]]
# Ledger balances, by hand (posted, debit-normal): fees = fees + return fees - fee reversals;
# losses = chargebacks + shortfalls - chargeback reversals - recoveries - refunds.
LEDGER = {
    ("acme", "USD"): {"payouts.fees": 25 + 200 + 25 + 25 - 25 + 25 + 25, "payouts.losses": 20_000 - 15_000},
    ("acme", "EUR"): {"payouts.fees": 20 + 500 + 20, "payouts.losses": 100 + 30_000 - 30_000 + 1_000 - 400},
    ("globex", "USD"): {"payouts.fees": 25, "payouts.losses": 1_000},
}


def with_ids(rows: list[dict[str, Any]], ids: dict[str, str]) -> list[dict[str, Any]]:
    """The rows as the report gives them: `payout_id` in place of the fixture's name."""
    return [{"payout_id": ids[r["name"]], **{k: v for k, v in r.items() if k != "name"}} for r in rows]
