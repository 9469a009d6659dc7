"""The disputes of `console_pages_bench.py`'s fixture (issue 41 point 4: the console's disputes queue
and a dispute's page).

- Bulk (written directly, as the rest of the bulk, bypassing the services): one dispute on every
  100th succeeded payment (about 940 at 100,000 payments), opened an hour after its payment, its
  evidence due 7 days after that (so the month's older ones are overdue): 60% `needs_response`,
  10% `warning_needs_response` (an inquiry: nothing withdrawn), 10% `under_review`, 10% `won`
  (reinstated), 10% `lost`. No transfers and no audit events: no list reads them.
- By the services: a chargeback on a service-made payment of tenant `bench-m0`, recorded by
  `disputes.service.record` as from the processor's `dispute.created` webhook (its withdrawal
  transfer and audit events), whose page is opened.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import text

from paycore.db.engine import Database
from paycore.disputes import service as disputes
from paycore.disputes.models import disputes as disputes_table
from paycore.disputes.types import ProcessorDispute
from paycore.kit import ids
from paycore.kit.clock import DAY_US
from paycore.kit.clock import now_us as clock_now_us

EVERY: Final = 100
OPENED_AFTER_US: Final = 3_600 * 1_000_000
WINDOW_US: Final = 7 * DAY_US
FEE_MINOR: Final = 1_500
_STATUSES: Final = ("needs_response",) * 6 + ("warning_needs_response", "under_review", "won", "lost")
BATCH: Final = 500


def bulk(database: Database) -> int:
    """The bulk disputes; returns how many."""
    with database.read() as connection:
        found = connection.execute(
            text("SELECT tenant_id, id, amount_minor, currency, created_at_us FROM payments WHERE status = 'succeeded'")
        ).all()
    rows = [_row(index, payment) for index, payment in enumerate(found[::EVERY])]
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        database.transaction(lambda connection, batch=batch: connection.execute(disputes_table.insert(), batch))
    return len(rows)


def _row(index: int, payment: Any) -> dict[str, Any]:
    status = _STATUSES[index % len(_STATUSES)]
    opened = payment.created_at_us + OPENED_AFTER_US
    chargeback = status != "warning_needs_response"
    return {
        "tenant_id": payment.tenant_id,
        "id": ids.new_id("dp"),
        "processor_dispute_id": f"dp_sbx_bench_{index:08d}",
        "payment_id": payment.id,
        "type": "chargeback" if chargeback else "inquiry",
        "status": status,
        "reason": "fraudulent" if index % 3 else "product_not_received",
        "amount_minor": payment.amount_minor,
        "currency": payment.currency,
        "fee_minor": FEE_MINOR if chargeback else 0,
        "evidence_due_by_us": opened + WINDOW_US,
        "withdrawn_minor": payment.amount_minor + FEE_MINOR if chargeback else 0,
        "reinstated_minor": payment.amount_minor if status == "won" else 0,
        "withdrawal_transfer_id": None,
        "reinstatement_transfer_id": None,
        "created_at_us": opened,
        "updated_at_us": opened,
    }


def by_services(database: Database, tenant: str, payment_id: str) -> str:
    """A chargeback recorded as the processor's webhook records it; its id."""
    now = clock_now_us()
    seen = ProcessorDispute(
        processor_dispute_id="dp_sbx_bench_real",
        charge_request_id=payment_id,
        merchant_id=tenant,
        type="chargeback",
        status="needs_response",
        reason="fraudulent",
        amount_minor=12_345,
        currency="USD",
        fee_minor=FEE_MINOR,
        evidence_due_by_us=now + WINDOW_US,
    )
    done = database.transaction(
        lambda connection: disputes.record(connection, seen, cause="webhook", actor="processor", now_us=now)
    )
    assert done == "applied", done
    with database.read() as connection:
        found = disputes.find(connection, tenant, seen.processor_dispute_id)
    assert found is not None
    return found.id
