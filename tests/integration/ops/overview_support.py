"""Rows for the overview's charts written directly, at the times a test needs (the services
take the clock of the moment they run): every column a service writes, filled; the events as
the services record them. As `bench/_console_fixture.py` does for the console's benchmark."""

from __future__ import annotations

import itertools
from typing import Any

from sqlalchemy import Integer, String, Table, Text

from paycore.audit.models import events
from paycore.db.engine import Database
from paycore.kit.clock import DAY_US, parse_rfc3339
from paycore.payments.models import payments
from paycore.reconciliation.models import reconciliation_breaks
from paycore.refunds.models import refunds

_ids = itertools.count(1)
HOUR_US = 3_600_000_000


def at(moment: str) -> int:
    return parse_rfc3339(moment)


def row(table: Table, **values: Any) -> dict[str, Any]:
    """Every NOT NULL column of `table` without a server default filled (0, "x"), then `values`."""
    made: dict[str, Any] = {}
    for column in table.columns:
        if column.nullable or column.server_default is not None:
            continue
        made[column.name] = "x" if isinstance(column.type, String | Text) else 0
        assert isinstance(column.type, String | Text | Integer), column
    made.update({"metadata": "{}"} if "metadata" in table.columns else {})
    return {**made, "id": f"t{next(_ids)}", **values}


def payment(tenant: str, moment: str | int, status: str, amount_minor: int, currency: str = "USD") -> dict[str, Any]:
    key = f"k{next(_ids)}"
    created = at(moment) if isinstance(moment, str) else moment
    return row(
        payments,
        tenant_id=tenant,
        idempotency_key=key,
        amount_minor=amount_minor,
        currency=currency,
        status=status,
        created_at_us=created,
        updated_at_us=created,
    )


def event(tenant: str, moment: str | int, object_type: str, object_id: str, **values: Any) -> dict[str, Any]:
    return row(
        events,
        tenant_id=tenant,
        kind=values.pop("kind", "state_change"),
        object_type=object_type,
        object_id=object_id,
        data="{}",
        created_at_us=at(moment) if isinstance(moment, str) else moment,
        **{"from_state": None, "to_state": None, **values},
    )


def write(database: Database, table: Table, *rows: dict[str, Any]) -> None:
    with database.engine.begin() as connection:
        connection.execute(table.insert(), list(rows))


def a_month(database: Database, tenant: str, now_us: int) -> None:
    """30 days of a business that grows, by a fixed pattern (no randomness): payments every few
    hours in USD and EUR, a decline in twelve, refunds, payments in doubt for a while, breaks
    opened and resolved; what a screenshot of the overview shows."""
    made: list[dict[str, Any]] = []
    moves: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    start = now_us - now_us % HOUR_US - 29 * DAY_US
    for step in range(0, (now_us - start) // HOUR_US):
        created = start + step * HOUR_US + 7 * 60_000_000
        for number in range(1 + (step // 24) // 6 + (step % 24 in range(9, 18))):
            declined = (step + number) % 12 == 5
            currency = "EUR" if (step + number) % 3 == 0 else "USD"
            amount_minor = 1_500 + ((step * 37 + number * 101) % 40) * 250
            made.append(
                payment(tenant, created + number, "failed" if declined else "succeeded", amount_minor, currency)
            )
            if step % 29 == 3 and not declined:
                moves.append(
                    event(
                        tenant,
                        created + number,
                        "payment",
                        made[-1]["id"],
                        from_state="processing",
                        to_state="in_doubt",
                    )
                )
                later = created + number + (2 + step % 5) * HOUR_US
                if later < now_us:
                    moves.append(
                        event(tenant, later, "payment", made[-1]["id"], from_state="in_doubt", to_state="succeeded")
                    )
                else:
                    made[-1]["status"] = "in_doubt"
            if step % 17 == 0 and not declined:
                refunded = row(refunds, tenant_id=tenant, payment_id=made[-1]["id"], currency=currency)
                out.append(
                    {
                        **refunded,
                        "amount_minor": amount_minor // 2,
                        "status": "succeeded",
                        "created_at_us": created + HOUR_US,
                        "updated_at_us": created,
                    }
                )
        if step % 53 == 11:
            found = row(
                reconciliation_breaks, tenant_id=tenant, status="open", finding_key=f"f{step}", created_at_us=created
            )
            moves.append(
                event(tenant, created, "payment", found["id"], kind="note", type="reconciliation.break_opened")
            )
            if step < 500:
                found["status"] = "resolved"
                moves.append(
                    event(
                        tenant,
                        created + 40 * HOUR_US,
                        "payment",
                        found["id"],
                        kind="note",
                        type="reconciliation.break_resolved",
                    )
                )
            write(database, reconciliation_breaks, found)
    write(database, payments, *made)
    write(database, refunds, *[refund for refund in out if refund["created_at_us"] < now_us])
    write(database, events, *moves)
