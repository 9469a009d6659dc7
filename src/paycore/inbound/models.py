"""Webhooks received from the processor (SPEC §10): one row per processor event id.

The primary key is the dedupe: a redelivered event finds its row and is a no-op. An event for
an object paycore does not know yet is kept as `unmatched` and retried by a worker, never
dropped; an event older than its object's state is kept as `stale` and changes nothing.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)

from paycore.db.metadata import created_at_column, metadata, tenant_id_column

STATUSES = ("applied", "stale", "unmatched", "abandoned")

processor_webhooks = Table(
    "processor_webhooks",
    metadata,
    tenant_id_column(),
    Column("event_id", String(128), nullable=False),
    Column("type", String(64), nullable=False),
    Column("object_type", String(32), nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("payload", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at_us", BigInteger, nullable=True),
    created_at_column(),
    Column("processed_at_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("tenant_id", "event_id"),
    CheckConstraint("status IN ('applied', 'stale', 'unmatched', 'abandoned')", name="status"),
    Index("ix_processor_webhooks_due", "next_attempt_at_us"),
    # A tenant's events to match again, claimed tenant by tenant (migration 0044).
    Index(
        "ix_processor_webhooks_tenant_due",
        "tenant_id",
        "next_attempt_at_us",
        "event_id",
        sqlite_where=text("next_attempt_at_us IS NOT NULL"),
        postgresql_where=text("next_attempt_at_us IS NOT NULL"),
    ),
)
