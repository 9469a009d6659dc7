"""The loss report's JSON (SPEC §11, docs/losses.md): amounts are JSON integers of minor units."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from paycore.reports.dispute_losses import DisputeTotal
from paycore.reports.losses import CurrencyTotal, LossFilters, LossReport, LossRow


def loss_row_json(row: LossRow) -> dict[str, Any]:
    return {"object": "payout_loss", **asdict(row)}


def totals_json(totals: list[CurrencyTotal]) -> list[dict[str, Any]]:
    return [{"currency": t.currency, "loss_minor": t.loss_minor, "payouts": t.payouts} for t in totals]


def dispute_totals_json(totals: list[DisputeTotal]) -> list[dict[str, Any]]:
    """Chargebacks on payments by currency (docs/losses.md, "Disputes on payments")."""
    return [asdict(total) for total in totals]


def report_json(report: LossReport, filters: LossFilters) -> dict[str, Any]:
    """`from` / `to` as asked (null: unbounded); `totals` over every page of the filtered set."""
    return {
        "object": "list",
        "data": [loss_row_json(row) for row in report.rows],
        "has_more": report.has_more,
        "totals": totals_json(report.totals),
        "dispute_totals": dispute_totals_json(report.dispute_totals),
        "from": filters.from_day,
        "to": filters.to_day,
    }
