"""Manual resolutions (ADR 0016): one row per proposal that a person settle an item by hand.

An operator proposes an outcome (`succeeded` or `failed`) for a payment, refund or payout that
waits on the processor, with a written evidence note; a different approver confirms or rejects
it. At most one proposal per item is open at a time (`uq_manual_resolutions_proposed`, a
partial unique index), and at most one is ever confirmed (`uq_manual_resolutions_confirmed`).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import BigInteger, CheckConstraint, Column, Index, PrimaryKeyConstraint, String, Table, Text, text

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column

EVIDENCE_CHARS_MAX: Final = 2000
_PROPOSED: Final = "status = 'proposed'"
_CONFIRMED: Final = "status = 'confirmed'"

manual_resolutions = Table(
    "manual_resolutions",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("object_type", String(16), nullable=False),  # payment | refund | payout
    Column("object_id", String(ID_LENGTH), nullable=False),
    Column("object_status", String(20), nullable=False),  # the item's status when proposed
    Column("outcome", String(16), nullable=False),  # succeeded | failed
    Column("evidence", Text, nullable=False),  # the proposer's written note
    Column("status", String(16), nullable=False),  # proposed | confirmed | rejected
    Column("proposed_by", String(64), nullable=False),
    Column("decided_by", String(64), nullable=True),
    Column("decision_note", Text, nullable=True),
    created_at_column(),
    Column("updated_at_us", BigInteger, nullable=False),
    Column("decided_at_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("tenant_id", "id"),
    CheckConstraint("object_type IN ('payment', 'refund', 'payout')", name="object_type"),
    CheckConstraint("outcome IN ('succeeded', 'failed')", name="outcome"),
    CheckConstraint("status IN ('proposed', 'confirmed', 'rejected')", name="status"),
    Index("ix_manual_resolutions_object", "tenant_id", "object_id", "id"),
    Index("ix_manual_resolutions_status", "tenant_id", "status", "id"),
    Index(
        "uq_manual_resolutions_proposed",
        "tenant_id",
        "object_type",
        "object_id",
        unique=True,
        sqlite_where=text(_PROPOSED),
        postgresql_where=text(_PROPOSED),
    ),
    Index(
        "uq_manual_resolutions_confirmed",
        "tenant_id",
        "object_type",
        "object_id",
        unique=True,
        sqlite_where=text(_CONFIRMED),
        postgresql_where=text(_CONFIRMED),
    ),
)
