"""Tenants and their API keys (only a SHA-256 of each key is stored)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, PrimaryKeyConstraint, String, Table, UniqueConstraint

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column

tenants = Table(
    "tenants",
    metadata,
    tenant_id_column(),
    Column("name", String(200), nullable=False),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id"),
)

api_keys = Table(
    "api_keys",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("key_hash", String(64), nullable=False),
    Column("key_prefix", String(16), nullable=False),
    created_at_column(),
    Column("revoked_at_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("key_hash"),
)

# Per-tenant settings of money rules. A tenant without a row has the defaults (no approval).
tenant_settings = Table(
    "tenant_settings",
    metadata,
    tenant_id_column(),
    # A refund waits in requires_approval for a person when its payment's refunds (not failed or
    # canceled, it included) add up to more than this; NULL: never.
    Column("refund_approval_threshold_minor", BigInteger, nullable=True),
    # An item in doubt this long may be resolved by hand; NULL: the default (72 h). Migration 0016.
    Column("manual_resolution_after_seconds", BigInteger, nullable=True),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant_id"),
)
