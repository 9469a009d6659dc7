"""Payments: money taken from a card or bank account through an external processor (SPEC §6).

A payment's status changes only through `paycore.payments.states` (one transition table),
by compare-and-set on the stored status, and every change is an `events` row written in the
same transaction. The ledger holds the money: a pending transfer (processor clearing ->
destination account) written with the payment, posted on success, voided on failure.
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
    text,
)

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column
from paycore.lifecycle.columns import due_index, faulted_index, tenant_due_index, work_columns

STATUSES = ("processing", "requires_capture", "succeeded", "failed", "in_doubt", "canceled")

payments = Table(
    "payments",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("idempotency_key", String(255), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("source_type", String(16), nullable=False),
    Column("source_token", String(255), nullable=False),
    Column("destination_account_id", String(ID_LENGTH), nullable=False),
    Column("description", Text, nullable=True),
    Column("metadata", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("failure_code", String(64), nullable=True),
    # Sent on every call about this payment; stored before the first call (SPEC §3.1, §6).
    Column("processor_request_id", String(128), nullable=False),
    Column("processor_reference", String(128), nullable=True),
    Column("transfer_id", String(ID_LENGTH), nullable=False),
    Column("refunded_minor", BigInteger, nullable=False),
    # The resolver's schedule and claim (SPEC §10): NULL next_attempt_at_us = nothing to do.
    *work_columns(),  # attempts, next_attempt_at_us, claimed_by, claimed_until_us, ... (lifecycle.columns)
    created_at_column(),
    Column("updated_at_us", BigInteger, nullable=False),
    # Authorize now, capture later (SPEC §6.1, migration 0033). NULL amounts: an automatic payment.
    Column("capture_method", String(16), nullable=False, server_default="automatic"),
    Column("amount_capturable_minor", BigInteger, nullable=True),
    Column("amount_captured_minor", BigInteger, nullable=True),
    Column("authorization_expires_at_us", BigInteger, nullable=True),
    Column("cancellation_reason", String(16), nullable=True),
    # The call sent on an authorized payment whose outcome is not known yet (capture | cancel),
    # the key of the request that sent it, and the amount a capture asked for.
    Column("operation", String(16), nullable=True),
    Column("operation_idempotency_key", String(255), nullable=True),
    Column("capture_requested_minor", BigInteger, nullable=True),
    # What open chargebacks hold of the payment (SPEC §6.2, migration 0035): rule zero counts it.
    Column("disputed_minor", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "idempotency_key"),
    CheckConstraint(
        "status IN ('processing', 'requires_capture', 'succeeded', 'failed', 'in_doubt', 'canceled')", name="status"
    ),
    CheckConstraint("capture_method IN ('automatic', 'manual')", name="capture_method"),
    CheckConstraint("amount_minor > 0 AND amount_minor <= 9007199254740991", name="amount_minor"),
    CheckConstraint("refunded_minor >= 0 AND refunded_minor <= amount_minor", name="refunded_minor"),
    Index("ix_payments_status", "tenant_id", "status", "id"),
    due_index("payments"),  # the worker's queue (migration 0025)
    tenant_due_index("payments"),  # a tenant's part of it, claimed (migration 0044)
    Index("ix_payments_id", "id"),  # the console's lists over every tenant, by id (migration 0017)
    # The overview's charts, by time (migration 0040): with what they count and sum, so that the
    # 30 days are read from the index alone.
    Index(
        "ix_payments_created",
        "created_at_us",
        "status",
        "currency",
        "amount_minor",
        "amount_captured_minor",
        "tenant_id",
    ),
    # The console's search across tenants (migration 0041).
    Index("ix_payments_processor_reference", "processor_reference", "tenant_id"),
    Index("ix_payments_idempotency_key", "idempotency_key", "tenant_id"),
    faulted_index("payments"),  # the items a worker could not move (migration 0022)
    # The open authorizations, oldest first: `/metrics` (migration 0034). Partial: never the history.
    Index(
        "ix_payments_authorizations_open",
        "created_at_us",
        "id",
        sqlite_where=text("status = 'requires_capture'"),
        postgresql_where=text("status = 'requires_capture'"),
    ),
)
