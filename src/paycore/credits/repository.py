"""SQL for credits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection

from paycore.credits.models import credits

if TYPE_CHECKING:
    from paycore.credits.service import Credit


def insert_credit(connection: Connection, credit: Credit, lines_json: str) -> None:
    connection.execute(
        credits.insert().values(
            tenant_id=credit.tenant_id,
            id=credit.id,
            idempotency_key=credit.idempotency_key,
            currency=credit.currency,
            amount_minor=credit.amount_minor,
            lines=lines_json,
            transfer_id=credit.transfer_id,
            created_at_us=credit.created_at_us,
        )
    )
