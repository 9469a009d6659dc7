"""Outgoing webhooks (ADR 0015): published events and their delivery.

- `events` gains `object_sequence` and `snapshot` (nullable: set on published rows only, the
  state changes and break events written from this revision on; older state changes stay
  listed by `GET /v1/events` without them) and an index by type for its `type` filter.
- `webhook_endpoints`, `webhook_deliveries`, `webhook_attempts`: new tables.
- the trigger `events_publish`: a published event (`object_sequence` set) is queued, in its own
  INSERT, for every enabled endpoint of its tenant that takes its type: one delivery each, id
  `whd_<the event's ULID><the endpoint's ULID>`, due at once. The fan-out costs the money path
  no statement (ADR 0015). An endpoint takes a type when its `events` (JSON, as the code stores
  it: `json.dumps(list)`) is `["*"]` or holds the type in quotes.

New columns are nullable and new tables unread by older code: code of 0014 runs against this
schema unchanged (its events are simply not published). This release's code writes them on
every state change, so its OLDEST_COMPATIBLE_REVISION is 0015.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04 09:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("object_sequence", sa.Integer(), nullable=True))
    op.add_column("events", sa.Column("snapshot", sa.Text(), nullable=True))
    # IF NOT EXISTS: on a large `events` an operator builds it first, CONCURRENTLY (docs/migrations.md).
    op.create_index(op.f("ix_events_type"), "events", ["tenant_id", "type", "id"], if_not_exists=True)
    op.create_table(
        "webhook_endpoints",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("events", sa.Text(), nullable=False),
        sa.Column("description", sa.String(1000), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("disabled_reason", sa.String(500), nullable=True),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("previous_secret", sa.String(128), nullable=True),
        sa.Column("previous_secret_until_us", sa.BigInteger(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("failing_since_us", sa.BigInteger(), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.Column("blocked_until_us", sa.BigInteger(), nullable=True),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("claimed_until_us", sa.BigInteger(), nullable=True),
        sa.Column("served_at_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_webhook_endpoints")),
        sa.CheckConstraint("status IN ('enabled', 'disabled', 'deleted')", name=op.f("ck_webhook_endpoints_status")),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("endpoint_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at_us", sa.BigInteger(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=True),
        sa.Column("delivered_at_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_webhook_deliveries")),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'failed', 'canceled')", name=op.f("ck_webhook_deliveries_status")
        ),
    )
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["tenant_id", "endpoint_id", "status", "next_attempt_at_us"],
    )
    op.create_index("ix_webhook_deliveries_event", "webhook_deliveries", ["tenant_id", "event_id"])
    op.create_table(
        "webhook_attempts",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("delivery_id", sa.String(64), nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("endpoint_id", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(500), nullable=True),
        sa.Column("response_excerpt", sa.String(1024), nullable=True),
        sa.Column("worker", sa.String(64), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_webhook_attempts")),
    )
    op.create_index("ix_webhook_attempts_event", "webhook_attempts", ["tenant_id", "event_id", "id"])

    _create_publish_trigger()


_DELIVERY = """
    INSERT INTO webhook_deliveries (tenant_id, id, event_id, endpoint_id, status, attempts,
                                    next_attempt_at_us, created_at_us, updated_at_us)
    SELECT NEW.tenant_id, 'whd_' || substr(NEW.id, 5) || substr(e.id, 4), NEW.id, e.id, 'pending', 0,
           NEW.created_at_us, NEW.created_at_us, NEW.created_at_us
    FROM webhook_endpoints e
    WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled'
      AND (e.events = '["*"]' OR {position}(e.events, '"' || NEW.type || '"') > 0);
"""


def _create_publish_trigger() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION paycore_events_publish() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            + _DELIVERY.format(position="strpos")
            + " RETURN NULL; END $$"
        )
        op.execute(
            "CREATE TRIGGER events_publish AFTER INSERT ON events FOR EACH ROW "
            "WHEN (NEW.object_sequence IS NOT NULL) EXECUTE FUNCTION paycore_events_publish()"
        )
        return
    op.execute(
        "CREATE TRIGGER events_publish AFTER INSERT ON events WHEN NEW.object_sequence IS NOT NULL BEGIN"
        + _DELIVERY.format(position="instr")
        + " END"
    )


def downgrade() -> None:
    op.execute(
        "DROP TRIGGER IF EXISTS events_publish" + (" ON events" if op.get_bind().dialect.name == "postgresql" else "")
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS paycore_events_publish()")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")
    op.drop_index(op.f("ix_events_type"), table_name="events")
    op.drop_column("events", "snapshot")
    op.drop_column("events", "object_sequence")
