"""Outgoing webhooks' tables (ADR 0015).

- `webhook_endpoints`: a tenant's receiver: URL, the event types it takes, its signing
  secret (and the previous one while a rotation overlaps), its health (consecutive failures,
  failing since, blocked until: the endpoint's own backoff), and the lease a worker holds on
  it while it delivers (one worker per endpoint at a time: bounded concurrency per endpoint).
- `webhook_deliveries`: one event to one endpoint, the work item: pending until delivered,
  failed (given up after the retry window) or canceled (its endpoint deleted).
- `webhook_attempts`: every POST made, append-only: status code, latency, error, a bounded
  excerpt of the answer.

The events themselves are the audit log's published rows (`events.object_sequence` set),
written in the transaction of the change they announce.
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
)

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column

URL_COLUMN_LENGTH = 2048
SECRET_LENGTH = 128
ERROR_LENGTH = 500
EXCERPT_LENGTH = 1024

webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("url", String(URL_COLUMN_LENGTH), nullable=False),
    Column("events", Text, nullable=False),  # JSON list of types, or ["*"]
    Column("description", String(1000), nullable=True),
    Column("status", String(16), nullable=False),
    Column("disabled_reason", String(ERROR_LENGTH), nullable=True),
    Column("secret", String(SECRET_LENGTH), nullable=False),
    Column("previous_secret", String(SECRET_LENGTH), nullable=True),
    Column("previous_secret_until_us", BigInteger, nullable=True),
    Column("failures", Integer, nullable=False),  # consecutive failed attempts
    Column("failing_since_us", BigInteger, nullable=True),
    Column("last_error", String(ERROR_LENGTH), nullable=True),
    Column("blocked_until_us", BigInteger, nullable=True),
    Column("claimed_by", String(64), nullable=True),
    Column("claimed_until_us", BigInteger, nullable=True),
    Column("served_at_us", BigInteger, nullable=True),  # last claimed: least recently served goes first
    created_at_column(),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant_id", "id"),
    CheckConstraint("status IN ('enabled', 'disabled', 'deleted')", name="status"),
)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("event_id", String(ID_LENGTH), nullable=False),
    Column("endpoint_id", String(ID_LENGTH), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at_us", BigInteger, nullable=True),
    Column("last_status_code", Integer, nullable=True),
    Column("last_error", String(ERROR_LENGTH), nullable=True),
    Column("delivered_at_us", BigInteger, nullable=True),
    created_at_column(),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant_id", "id"),
    CheckConstraint("status IN ('pending', 'delivered', 'failed', 'canceled')", name="status"),
    Index("ix_webhook_deliveries_due", "tenant_id", "endpoint_id", "status", "next_attempt_at_us"),
    Index("ix_webhook_deliveries_event", "tenant_id", "event_id"),
)

webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("delivery_id", String(ID_LENGTH), nullable=False),
    Column("event_id", String(ID_LENGTH), nullable=False),
    Column("endpoint_id", String(ID_LENGTH), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),  # delivered | failed
    Column("status_code", Integer, nullable=True),
    Column("latency_ms", Integer, nullable=False),
    Column("error", String(ERROR_LENGTH), nullable=True),
    Column("response_excerpt", String(EXCERPT_LENGTH), nullable=True),
    Column("worker", String(64), nullable=False),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "id"),
    Index("ix_webhook_attempts_event", "tenant_id", "event_id", "id"),
)
