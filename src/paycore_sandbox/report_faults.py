"""The settlement-report faults of one object, recorded by the call that creates it.

A `report_*` fault is decided with the call (like `settle_late`), stored here in the same
transaction as the object (`sandbox_report_faults`, one row per fault) and applied by
`settlement` when a report is written, so the report of any day stays wrong the same way.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from sqlalchemy import Connection

from paycore.kit.ids import new_ulid
from paycore_sandbox import repository
from paycore_sandbox.faults import Decision

Kind = Literal["charge", "refund", "payout"]
UNKNOWN_REQUEST_ID_PREFIX: Final = "unknown_"  # a request id paycore never sent


def record(
    connection: Connection, kind: Kind, request_id: str, faults: Decision, unknown_processor_id: str | None = None
) -> int:
    """Store the report faults `faults` holds for the object just created; return how many.
    `unknown_processor_id` is the processor id of the unknown charge, given when
    `faults.report_unknown_charge` is set (the caller knows how its ids look)."""
    assert faults.report_unknown_charge == (unknown_processor_id is not None)
    assert kind == "charge" or not faults.report_unknown_charge, "an unknown charge is made by a charge call"
    rows = [{**row, "kind": kind, "request_id": request_id} for row in _rows(faults, unknown_processor_id)]
    if rows:
        repository.insert_report_faults(connection, rows)
    return len(rows)


def _rows(faults: Decision, unknown_processor_id: str | None) -> list[dict[str, Any]]:
    none: dict[str, Any] = {"value_minor": None, "unknown_request_id": None, "unknown_processor_id": None}
    rows = []
    if faults.report_drop_line:
        rows.append({**none, "fault": "report_drop_line"})
    if faults.report_amount_delta_minor != 0:
        rows.append({**none, "fault": "report_amount_delta", "value_minor": faults.report_amount_delta_minor})
    if faults.report_fee_delta_minor != 0:
        rows.append({**none, "fault": "report_fee_delta", "value_minor": faults.report_fee_delta_minor})
    if faults.report_status:
        rows.append({**none, "fault": "report_status"})
    if faults.report_currency:
        rows.append({**none, "fault": "report_currency"})
    if faults.report_duplicate_line:
        rows.append({**none, "fault": "report_duplicate_line"})
    if faults.report_malformed_line:
        rows.append({**none, "fault": "report_malformed_line"})
    if unknown_processor_id is not None:
        unknown = {
            "unknown_request_id": UNKNOWN_REQUEST_ID_PREFIX + new_ulid(),
            "unknown_processor_id": unknown_processor_id,
        }
        rows.append({**none, **unknown, "fault": "report_unknown_charge"})
    return rows
