"""Refunds (SPEC §7): money given back for a succeeded payment, never more than it.

Rule zero is kept by the database: creating a refund reserves its amount on the payment row
with one conditional UPDATE (`refunded_minor + amount <= amount_minor`, and a CHECK
constraint behind it), in the transaction that inserts the refund. Failed and canceled
refunds release their amount the same way. No in-process lock is involved, so it holds for
any number of API processes.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column
from paycore.lifecycle.columns import due_index, faulted_index, tenant_due_index, work_columns

STATUSES = ("requires_approval", "pending", "processing", "succeeded", "failed", "in_doubt", "canceled")

refunds = Table(
    "refunds",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("payment_id", String(ID_LENGTH), nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("reason", Text, nullable=True),
    Column("status", String(20), nullable=False),
    Column("failure_code", String(64), nullable=True),
    # Sent on every call about this refund; stored before the first call (SPEC §3.1, §8).
    Column("processor_request_id", String(128), nullable=False),
    Column("processor_reference", String(128), nullable=True),
    Column("transfer_id", String(ID_LENGTH), nullable=True),
    *work_columns(),  # attempts, next_attempt_at_us, claimed_by, claimed_until_us, ... (lifecycle.columns)
    created_at_column(),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "idempotency_key"),
    CheckConstraint(
        "status IN ('requires_approval', 'pending', 'processing', 'succeeded', 'failed', 'in_doubt', 'canceled')",
        name="status",
    ),
    CheckConstraint("amount_minor > 0 AND amount_minor <= 9007199254740991", name="amount_minor"),
    Index("ix_refunds_payment", "tenant_id", "payment_id", "id"),
    Index("ix_refunds_created", "created_at_us"),  # the overview's charts, by time (migration 0040)
    # The console's search across tenants (migration 0041).
    Index("ix_refunds_id", "id", "tenant_id"),
    Index("ix_refunds_processor_reference", "processor_reference", "tenant_id"),
    Index("ix_refunds_idempotency_key", "idempotency_key", "tenant_id"),
    due_index("refunds"),  # the worker's queue (migration 0025)
    tenant_due_index("refunds"),  # a tenant's part of it, claimed (migration 0044)
    faulted_index("refunds"),  # the items a worker could not move (migration 0022)
)
