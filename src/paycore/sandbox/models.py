"""The sandbox's own tables, on its own MetaData (never in paycore's migrations).

- `sandbox_charges`: one row per charge request id (the primary key is the dedupe: two
  concurrent requests with one id insert one row). `status` is what the caller sees now;
  `final_status` is the outcome decided when the charge was taken, reached at
  `settle_at_us` by a pending (tok_pending, settle_late) charge. `refunded_minor` reserves
  the succeeded and pending refunds, and the database refuses it above `amount_minor`.
- `sandbox_refunds`: one row per refund request id, against a charge.
- `sandbox_webhooks`: the outbox. One row per delivery of an event (a duplicated event has
  two rows with one `event_id`), written in the transaction that changed the object's
  status. `held` rows (reorder_webhooks) wait until the object's final event is queued.
- `sandbox_webhook_attempts`: every attempt to deliver, with its HTTP status or error.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

from paycore.sandbox.limits import MERCHANT_ID_LENGTH_MAX, REQUEST_ID_LENGTH_MAX, TOKEN_LENGTH_MAX

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID_LENGTH: Final = 64
STATUS_LENGTH: Final = 16
CODE_LENGTH: Final = 64
_STATUS_IN = "IN ('succeeded', 'failed', 'pending')"


def _status_checks() -> tuple[CheckConstraint, ...]:
    return (
        CheckConstraint(f"status {_STATUS_IN}", name="status"),
        CheckConstraint("final_status IN ('succeeded', 'failed')", name="final_status"),
        CheckConstraint("amount_minor > 0", name="amount_positive"),
        # pending <=> a time to settle: a pending row without one would never finish.
        CheckConstraint("(status = 'pending') = (settle_at_us IS NOT NULL)", name="pending_settles"),
        CheckConstraint("(status = 'failed') = (failure_code IS NOT NULL)", name="failure_code"),
        CheckConstraint("(final_status = 'failed') = (final_failure_code IS NOT NULL)", name="final_failure_code"),
        # a status only ever moves from pending to the final one
        CheckConstraint("status = 'pending' OR status = final_status", name="status_final"),
    )


charges = Table(
    "sandbox_charges",
    metadata,
    Column("request_id", String(REQUEST_ID_LENGTH_MAX), nullable=False),
    Column("processor_charge_id", String(ID_LENGTH), nullable=False, unique=True),
    Column("merchant_id", String(MERCHANT_ID_LENGTH_MAX), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("token", String(TOKEN_LENGTH_MAX), nullable=False),
    Column("description", Text, nullable=True),
    Column("status", String(STATUS_LENGTH), nullable=False),
    Column("failure_code", String(CODE_LENGTH), nullable=True),
    Column("final_status", String(STATUS_LENGTH), nullable=False),
    Column("final_failure_code", String(CODE_LENGTH), nullable=True),
    Column("settle_at_us", BigInteger, nullable=True),
    Column("refunded_minor", BigInteger, nullable=False),
    Column("webhook_duplicate", Boolean, nullable=False),
    Column("webhook_reorder", Boolean, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("request_id"),
    *_status_checks(),
    CheckConstraint("refunded_minor >= 0 AND refunded_minor <= amount_minor", name="refunded_within_amount"),
    Index("ix_sandbox_charges_created_at_us", "created_at_us"),
    Index("ix_sandbox_charges_status_settle_at_us", "status", "settle_at_us"),
)

refunds = Table(
    "sandbox_refunds",
    metadata,
    Column("request_id", String(REQUEST_ID_LENGTH_MAX), nullable=False),
    Column("processor_refund_id", String(ID_LENGTH), nullable=False, unique=True),
    Column("merchant_id", String(MERCHANT_ID_LENGTH_MAX), nullable=False),
    Column(
        "charge_request_id",
        String(REQUEST_ID_LENGTH_MAX),
        ForeignKey("sandbox_charges.request_id"),
        nullable=False,
    ),
    Column("payment_reference", String(ID_LENGTH), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("status", String(STATUS_LENGTH), nullable=False),
    Column("failure_code", String(CODE_LENGTH), nullable=True),
    Column("final_status", String(STATUS_LENGTH), nullable=False),
    Column("final_failure_code", String(CODE_LENGTH), nullable=True),
    Column("settle_at_us", BigInteger, nullable=True),
    Column("webhook_duplicate", Boolean, nullable=False),
    Column("webhook_reorder", Boolean, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("request_id"),
    *_status_checks(),
    Index("ix_sandbox_refunds_created_at_us", "created_at_us"),
    Index("ix_sandbox_refunds_status_settle_at_us", "status", "settle_at_us"),
    Index("ix_sandbox_refunds_charge_request_id", "charge_request_id"),
)

webhooks = Table(
    "sandbox_webhooks",
    metadata,
    Column("delivery_id", String(ID_LENGTH), nullable=False),
    Column("event_id", String(ID_LENGTH), nullable=False),
    Column("object_type", String(8), nullable=False),
    Column("object_request_id", String(REQUEST_ID_LENGTH_MAX), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("event_type", String(32), nullable=False),
    Column("body", Text, nullable=False),
    Column("state", String(STATUS_LENGTH), nullable=False),
    Column("held", Boolean, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Column("due_at_us", BigInteger, nullable=False),
    Column("delivered_at_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("delivery_id"),
    CheckConstraint("state IN ('pending', 'delivered', 'dead')", name="state"),
    CheckConstraint("object_type IN ('charge', 'refund')", name="object_type"),
    CheckConstraint("sequence >= 1 AND attempts >= 0", name="counts"),
    Index("ix_sandbox_webhooks_state_due_at_us", "state", "due_at_us"),
    Index("ix_sandbox_webhooks_object_request_id", "object_type", "object_request_id"),
    Index("ix_sandbox_webhooks_event_id", "event_id"),
)

webhook_attempts = Table(
    "sandbox_webhook_attempts",
    metadata,
    Column("delivery_id", String(ID_LENGTH), ForeignKey("sandbox_webhooks.delivery_id"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("attempted_at_us", BigInteger, nullable=False),
    Column("http_status", Integer, nullable=True),
    Column("error", String(500), nullable=True),
    PrimaryKeyConstraint("delivery_id", "attempt"),
)
