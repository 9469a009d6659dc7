"""The audit log: one append-only table of events (SPEC §11 audit paragraph, §10.1 outbox).

Every state change of a money object (from, to, cause, actor, time) and every call to a
processor (request, response or error, latency) is a row here, written in the same
transaction as the change it records. Rows are never updated or deleted (database triggers
refuse it, migration 0002). The `state_change` rows are also the outbox of events for the
tenant (§10.1): delivery state lives elsewhere, so this table stays append-only.

A row the tenant hears about (a state change of a payment, refund or payout; a break's
opening, resolution or supersession) is *published*: it carries `object_sequence` (1, 2, ...
per object: receivers order by it) and `snapshot` (the object as it was after the change,
JSON): what `GET /v1/events` lists and webhooks deliver (ADR 0015).
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, Column, Index, Integer, PrimaryKeyConstraint, String, Table, Text, text

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column

KINDS = ("state_change", "processor_call", "webhook", "api_call", "adjustment", "note")
# The events that move the console's in-doubt and open-break levels (`reports.activity`, which
# names them in this very text: a partial index serves only a query that repeats its WHERE).
LEVEL_EVENTS = (
    "(kind = 'state_change' AND (from_state = 'in_doubt' OR to_state = 'in_doubt'))"
    " OR type IN ('reconciliation.break_opened', 'reconciliation.break_resolved', 'reconciliation.break_superseded')"
)

events = Table(
    "events",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("type", String(64), nullable=False),  # payment.succeeded, processor.charge, ...
    Column("object_type", String(32), nullable=False),
    Column("object_id", String(ID_LENGTH), nullable=False),
    Column("from_state", String(32), nullable=True),
    Column("to_state", String(32), nullable=True),
    Column("cause", String(64), nullable=False),
    Column("actor", String(64), nullable=False),
    Column("data", Text, nullable=False),  # JSON
    Column("object_sequence", Integer, nullable=True),  # published rows only
    Column("snapshot", Text, nullable=True),  # JSON, published rows only
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "id"),
    CheckConstraint(
        "kind IN ('state_change', 'processor_call', 'webhook', 'api_call', 'adjustment', 'note')", name="kind"
    ),
    Index("ix_events_object", "tenant_id", "object_id", "id"),
    Index("ix_events_kind", "tenant_id", "kind", "id"),
    Index("ix_events_type", "tenant_id", "type", "id"),
    Index("ix_events_id", "id"),  # the console's audit log over every tenant, newest first (migration 0017)
    Index("ix_events_object_id", "object_id", "id"),  # ... filtered by object (0017)
    Index("ix_events_actor", "actor", "id"),  # ... filtered by actor (0017)
    # The few events that move the overview's in-doubt and open-break levels, by time (0040).
    Index("ix_events_levels", "created_at_us", sqlite_where=text(LEVEL_EVENTS), postgresql_where=text(LEVEL_EVENTS)),
)
