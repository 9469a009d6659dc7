"""Tenant prepaid credits: one row per accepted credit request, linked to its ledger transfer."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column

credits = Table(
    "credits",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("idempotency_key", String(255), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("lines", Text, nullable=False),
    Column("transfer_id", String(ID_LENGTH), nullable=False),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "idempotency_key"),
)
