"""Idempotency keys: one row per (tenant, key), written in the transaction it guards."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, PrimaryKeyConstraint, String, Table, Text

from paycore.db.metadata import created_at_column, metadata, tenant_id_column

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    tenant_id_column(),
    Column("key", String(255), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("response_status", Integer, nullable=True),
    Column("response_body", Text, nullable=True),
    created_at_column(),
    # NULL: kept forever (ledger transfers and credits keep their key forever, §3.1).
    Column("expires_at_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("tenant_id", "key"),
    Index("ix_idempotency_keys_expiry", "expires_at_us"),
)
