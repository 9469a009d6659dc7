"""Resolve refunds from the processor's settlement report (SPEC §8, §10): the third kind of
evidence, after a status query and a webhook. Only rows that are a refund's final status
(`succeeded`, `failed`) for a refund paycore has sent and not settled are applied, as evidence
through the refund's machine (the same rules as any answer); everything else is left alone. The full
reconciliation of §10 (breaks, missing items, amounts) is a later piece of work."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from functools import partial

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit.clock import now_us as clock_now_us
from paycore.lifecycle import machine
from paycore.lifecycle.evidence import Evidence
from paycore.processor.port import RefundResult
from paycore.refunds import lifecycle, states

REPORT_ROWS_MAX = 1_000_000


def resolve_from_report(database: Database, lines: Iterable[str], *, actor: str = "settlement_report") -> int:
    """Apply each settled refund row of the report to its refund if that is still unresolved.
    Streams the report (one short transaction per applied row); returns how many changed."""
    changed = 0
    for count, row in enumerate(csv.DictReader(lines), start=1):
        if count > REPORT_ROWS_MAX:
            raise ValueError(f"the report has more than {REPORT_ROWS_MAX} rows")
        if row.get("type") != "refund" or row.get("status") not in (states.SUCCEEDED, states.FAILED):
            continue
        changed += database.transaction(partial(_apply_row, row=row, actor=actor))
    return changed


def _apply_row(connection: Connection, row: dict[str, str], actor: str) -> int:
    refund = lifecycle.MACHINE.find(connection, row["merchant_id"], row["request_id"], for_update=True)
    if refund is None or refund.status not in states.UNRESOLVED:
        return 0
    result = RefundResult(
        request_id=row["request_id"],
        status=states.SUCCEEDED if row["status"] == states.SUCCEEDED else states.FAILED,
        processor_refund_id=row.get("processor_id") or "",
        amount_minor=int(row["amount_minor"]),
        currency=row["currency"],
    )
    evidence = Evidence.of_result(result, operation="settlement_report")
    applied = machine.apply_evidence(
        connection, lifecycle.MACHINE, refund, evidence, cause="settlement_report", actor=actor, now_us=clock_now_us()
    )
    return 1 if applied.changed else 0
