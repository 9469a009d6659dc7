"""SQL for credits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection

from paycore.db import driver

if TYPE_CHECKING:
    from paycore.credits.service import Credit

# On every credit: run on the driver, like the transfer it records (paycore.db.driver).
_INSERT = driver.statement(
    "INSERT INTO credits (tenant_id, id, idempotency_key, currency, amount_minor, lines, transfer_id, created_at_us)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def insert_credit(connection: Connection, credit: Credit, lines_json: str) -> None:
    driver.execute(
        connection,
        _INSERT,
        (
            credit.tenant_id,
            credit.id,
            credit.idempotency_key,
            credit.currency,
            credit.amount_minor,
            lines_json,
            credit.transfer_id,
            credit.created_at_us,
        ),
    )
