"""The sandbox's own tables, on its own MetaData (never in paycore's migrations).

- `sandbox_charges`: one row per charge request id (the primary key is the dedupe: two
  concurrent requests with one id insert one row). `status` is what the caller sees now;
  `final_status` is the outcome decided when the charge was taken, reached at
  `settle_at_us` by a pending (tok_pending, settle_late) charge. `refunded_minor` reserves
  the succeeded and pending refunds, and the database refuses it above `amount_minor`.
  A charge asked with `capture` manual is an authorization: `requires_capture` (its
  `final_status`, reached at once or after pending), then `captured` (`captured_minor` taken,
  `released_minor` the rest), `canceled` or `expired` (all released) — never two of them, and
  `captured + released = amount` once closed, which the database checks too. It expires at
  `authorization_expires_at_us` if not captured by then.
- `sandbox_charge_actions`: one row per capture or cancel request id (the primary key is the
  dedupe), against a charge; a refused one stores nothing.
- `sandbox_refunds`: one row per refund request id, against a charge.
- `sandbox_webhooks`: the outbox. One row per delivery of an event (a duplicated event has
  two rows with one `event_id`), written in the transaction that changed the object's
  status. `held` rows (reorder_webhooks) wait until the object's final event is queued.
  Its `object_type` is `charge`, `refund`, `payout` or `dispute` (the dispute tables:
  dispute_models.py).
- `sandbox_webhook_attempts`: every attempt to deliver, with its HTTP status or error.
- `sandbox_bank_batches`: the bank rail's batches, one open per (rail, currency) at a time
  (a partial unique index says so), closed by time or by size.
- `sandbox_bank_payouts`: one row per payout request id (the primary key is the dedupe), the
  request as sent, its batch, what the test account planned for it (`planned_*`), what has
  happened so far (`status` and a time per step) and when the next step is due
  (`next_step_at_us`: NULL while its batch is open and once nothing more will happen).
- `sandbox_report_faults`: the settlement-report faults decided for an object when the call
  that created it was made, one row per (kind, request id, fault), applied when the report is
  written: `value_minor` is the delta of report_amount_delta and report_fee_delta, and the
  `unknown_*` ids name the extra line of report_unknown_charge. A table of its own, so that
  sandbox databases made before these faults keep working (the sandbox has no migrations).
  Its CHECK lists the fault names (`faults.REPORT_FAULTS`); `create_all` does not change an
  existing table, so a database whose CHECK lacks a name is refused at open (service.py).
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
    text,
)

from paycore_sandbox.faults import REPORT_FAULTS
from paycore_sandbox.limits import (
    ACCOUNT_NUMBER_LENGTH_MAX,
    BENEFICIARY_NAME_LENGTH_MAX,
    BIC_LENGTH_MAX,
    IBAN_LENGTH_MAX,
    MERCHANT_ID_LENGTH_MAX,
    REQUEST_ID_LENGTH_MAX,
    ROUTING_NUMBER_LENGTH,
    TOKEN_LENGTH_MAX,
)

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
_CHARGE_STATUS_IN = "IN ('succeeded', 'failed', 'pending', 'requires_capture', 'captured', 'canceled', 'expired')"
_STATUS_FINAL = "status = 'pending' OR status = final_status"
# An authorization closes once, from requires_capture to one of these.
_AUTHORIZATION_CLOSED = "final_status = 'requires_capture' AND status IN ('captured', 'canceled', 'expired')"


def _status_checks(
    status_in: str = _STATUS_IN,
    final_status_in: str = "IN ('succeeded', 'failed')",
    status_final: str = _STATUS_FINAL,
) -> tuple[CheckConstraint, ...]:
    return (
        CheckConstraint(f"status {status_in}", name="status"),
        CheckConstraint(f"final_status {final_status_in}", name="final_status"),
        CheckConstraint("amount_minor > 0", name="amount_positive"),
        # pending <=> a time to settle: a pending row without one would never finish.
        CheckConstraint("(status = 'pending') = (settle_at_us IS NOT NULL)", name="pending_settles"),
        CheckConstraint("(status = 'failed') = (failure_code IS NOT NULL)", name="failure_code"),
        CheckConstraint("(final_status = 'failed') = (final_failure_code IS NOT NULL)", name="final_failure_code"),
        # a status only ever moves from pending to the final one (and an authorization on, once)
        CheckConstraint(status_final, name="status_final"),
    )


def _authorization_checks() -> tuple[CheckConstraint, ...]:
    return (
        CheckConstraint("capture IN ('automatic', 'manual')", name="capture"),
        CheckConstraint(
            "(capture = 'manual' AND final_status IN ('requires_capture', 'failed'))"
            " OR (capture = 'automatic' AND final_status IN ('succeeded', 'failed'))",
            name="capture_final",
        ),
        CheckConstraint("(capture = 'manual') = (authorization_expires_at_us IS NOT NULL)", name="expires"),
        CheckConstraint(
            "captured_minor >= 0 AND released_minor >= 0 AND captured_minor + released_minor <= amount_minor",
            name="authorization_amounts",
        ),
        # closed <=> all of it captured or released; captured <=> some of it taken, at a time
        CheckConstraint(
            "(status IN ('captured', 'canceled', 'expired')) = (captured_minor + released_minor = amount_minor)",
            name="authorization_closed",
        ),
        CheckConstraint("(status = 'captured') = (captured_minor > 0)", name="captured_amount"),
        CheckConstraint("(status = 'captured') = (captured_at_us IS NOT NULL)", name="captured_at"),
        CheckConstraint(
            "refunded_minor = 0 OR status = 'succeeded' OR (status = 'captured' AND refunded_minor <= captured_minor)",
            name="refunded_within_captured",
        ),
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
    Column("capture", String(STATUS_LENGTH), nullable=False),
    Column("captured_minor", BigInteger, nullable=False),
    Column("released_minor", BigInteger, nullable=False),
    Column("authorization_expires_at_us", BigInteger, nullable=True),
    Column("captured_at_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("request_id"),
    *_status_checks(
        _CHARGE_STATUS_IN,
        "IN ('succeeded', 'failed', 'requires_capture')",
        f"{_STATUS_FINAL} OR ({_AUTHORIZATION_CLOSED})",
    ),
    *_authorization_checks(),
    CheckConstraint("refunded_minor >= 0 AND refunded_minor <= amount_minor", name="refunded_within_amount"),
    Index("ix_sandbox_charges_created_at_us", "created_at_us"),
    Index("ix_sandbox_charges_status_settle_at_us", "status", "settle_at_us"),
    Index("ix_sandbox_charges_status_authorization_expires_at_us", "status", "authorization_expires_at_us"),
    Index("ix_sandbox_charges_captured_at_us", "captured_at_us"),
)

charge_actions = Table(
    "sandbox_charge_actions",
    metadata,
    Column("request_id", String(REQUEST_ID_LENGTH_MAX), nullable=False),
    Column("kind", String(8), nullable=False),
    Column("merchant_id", String(MERCHANT_ID_LENGTH_MAX), nullable=False),
    Column(
        "charge_request_id",
        String(REQUEST_ID_LENGTH_MAX),
        ForeignKey("sandbox_charges.request_id"),
        nullable=False,
    ),
    Column("payment_reference", String(ID_LENGTH), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),  # captured, or (cancel) released
    Column("currency", String(3), nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("request_id"),
    CheckConstraint("kind IN ('capture', 'cancel')", name="kind"),
    CheckConstraint("amount_minor > 0", name="amount_positive"),
    Index("ix_sandbox_charge_actions_charge_request_id", "charge_request_id"),
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
    CheckConstraint("object_type IN ('charge', 'refund', 'payout', 'dispute')", name="object_type"),
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

bank_batches = Table(
    "sandbox_bank_batches",
    metadata,
    Column("batch_id", String(ID_LENGTH), nullable=False),
    Column("rail", String(4), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("count", Integer, nullable=False),
    Column("total_minor", BigInteger, nullable=False),
    Column("opened_at_us", BigInteger, nullable=False),
    Column("closes_at_us", BigInteger, nullable=False),  # the window's end; it may close earlier, when full
    Column("closed_at_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("batch_id"),
    CheckConstraint("rail IN ('ach', 'sepa')", name="rail"),
    CheckConstraint("count >= 0 AND total_minor >= 0", name="totals"),
    CheckConstraint("(count = 0) = (total_minor = 0)", name="total_of_count"),
    CheckConstraint("closes_at_us >= opened_at_us", name="window"),
    CheckConstraint("closed_at_us IS NULL OR closed_at_us >= opened_at_us", name="closed_after_opened"),
    # One open batch per rail and currency: two payouts that find none cannot both open one.
    Index(
        "ix_sandbox_bank_batches_open",
        "rail",
        "currency",
        unique=True,
        sqlite_where=text("closed_at_us IS NULL"),
        postgresql_where=text("closed_at_us IS NULL"),
    ),
    Index("ix_sandbox_bank_batches_closes_at_us", "closes_at_us"),
)

_PAYOUT_STATUS_IN = "IN ('accepted', 'rejected', 'settled', 'returned')"


def _payout_checks() -> tuple[CheckConstraint, ...]:
    return (
        CheckConstraint(f"status {_PAYOUT_STATUS_IN}", name="status"),
        CheckConstraint("rail IN ('ach', 'sepa')", name="rail"),
        CheckConstraint("amount_minor > 0", name="amount_positive"),
        CheckConstraint(
            "(rail = 'sepa' AND iban IS NOT NULL AND routing_number IS NULL AND account_number IS NULL)"
            " OR (rail = 'ach' AND iban IS NULL AND bic IS NULL"
            " AND routing_number IS NOT NULL AND account_number IS NOT NULL)",
            name="account_of_rail",
        ),
        CheckConstraint("planned_outcome IN ('settled', 'rejected', 'returned')", name="planned_outcome"),
        CheckConstraint("(planned_outcome = 'settled') = (planned_code IS NULL)", name="planned_code"),
        CheckConstraint("NOT planned_return_late OR planned_outcome = 'returned'", name="planned_late"),
        CheckConstraint("status <> 'rejected' OR planned_outcome = 'rejected'", name="rejected_as_planned"),
        CheckConstraint("status NOT IN ('settled', 'returned') OR planned_outcome <> 'rejected'", name="settled_ok"),
        CheckConstraint("status <> 'returned' OR planned_outcome = 'returned'", name="returned_as_planned"),
        CheckConstraint("(status = 'rejected') = (failure_code IS NOT NULL)", name="failure_code"),
        CheckConstraint("(status = 'rejected') = (rejected_at_us IS NOT NULL)", name="rejected_at"),
        CheckConstraint("(status IN ('settled', 'returned')) = (settled_at_us IS NOT NULL)", name="settled_at"),
        CheckConstraint("(status = 'returned') = (returned_at_us IS NOT NULL)", name="returned_at"),
        CheckConstraint("(status = 'returned') = (return_code IS NOT NULL)", name="return_code"),
        CheckConstraint(
            "(status = 'returned') = (return_amount_minor IS NOT NULL)"
            " AND (return_amount_minor IS NULL OR (return_amount_minor > 0 AND return_amount_minor <= amount_minor))",
            name="return_amount",
        ),
        CheckConstraint("fee_minor >= 0 AND (status IN ('settled', 'returned') OR fee_minor = 0)", name="fee"),
        CheckConstraint("return_fee_minor >= 0 AND (status = 'returned' OR return_fee_minor = 0)", name="return_fee"),
        # Nothing is due after a rejection or a return, nor after a settlement that stays settled.
        CheckConstraint(
            "next_step_at_us IS NULL OR status = 'accepted' OR (status = 'settled' AND planned_outcome = 'returned')",
            name="next_step",
        ),
    )


bank_payouts = Table(
    "sandbox_bank_payouts",
    metadata,
    Column("request_id", String(REQUEST_ID_LENGTH_MAX), nullable=False),
    Column("bank_payout_id", String(ID_LENGTH), nullable=False, unique=True),
    Column("merchant_id", String(MERCHANT_ID_LENGTH_MAX), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("rail", String(4), nullable=False),
    Column("beneficiary_name", String(BENEFICIARY_NAME_LENGTH_MAX), nullable=False),
    Column("iban", String(IBAN_LENGTH_MAX), nullable=True),
    Column("bic", String(BIC_LENGTH_MAX), nullable=True),
    Column("routing_number", String(ROUTING_NUMBER_LENGTH), nullable=True),
    Column("account_number", String(ACCOUNT_NUMBER_LENGTH_MAX), nullable=True),
    Column("batch_id", String(ID_LENGTH), ForeignKey("sandbox_bank_batches.batch_id"), nullable=False),
    Column("status", String(STATUS_LENGTH), nullable=False),
    Column("planned_outcome", String(STATUS_LENGTH), nullable=False),
    Column("planned_code", String(CODE_LENGTH), nullable=True),
    Column("planned_return_late", Boolean, nullable=False),
    Column("planned_return_charges_minor", BigInteger, nullable=False),  # deducted by the returning bank
    Column("settle_late_ms", BigInteger, nullable=False),  # the settle_late fault: the bank answers later
    Column("fee_minor", BigInteger, nullable=False),
    Column("failure_code", String(CODE_LENGTH), nullable=True),
    Column("return_code", String(CODE_LENGTH), nullable=True),
    Column("return_amount_minor", BigInteger, nullable=True),
    Column("return_fee_minor", BigInteger, nullable=False),
    Column("webhook_duplicate", Boolean, nullable=False),
    Column("webhook_reorder", Boolean, nullable=False),
    Column("accepted_at_us", BigInteger, nullable=False),
    Column("rejected_at_us", BigInteger, nullable=True),
    Column("settled_at_us", BigInteger, nullable=True),
    Column("returned_at_us", BigInteger, nullable=True),
    Column("next_step_at_us", BigInteger, nullable=True),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("request_id"),
    *_payout_checks(),
    CheckConstraint("planned_return_charges_minor >= 0 AND settle_late_ms >= 0", name="plan_amounts"),
    Index("ix_sandbox_bank_payouts_next_step_at_us", "next_step_at_us"),
    Index("ix_sandbox_bank_payouts_batch_id", "batch_id"),
    Index("ix_sandbox_bank_payouts_settled_at_us", "settled_at_us"),
    Index("ix_sandbox_bank_payouts_returned_at_us", "returned_at_us"),
)

_REPORT_FAULTS_SQL: Final = ", ".join(f"'{name}'" for name in REPORT_FAULTS)
REPORT_FAULTS_CHECK: Final = "ck_sandbox_report_faults_fault"  # its name, by the naming convention

report_faults = Table(
    "sandbox_report_faults",
    metadata,
    Column("kind", String(8), nullable=False),
    Column("request_id", String(REQUEST_ID_LENGTH_MAX), nullable=False),
    Column("fault", String(32), nullable=False),
    Column("value_minor", BigInteger, nullable=True),
    Column("unknown_request_id", String(ID_LENGTH), nullable=True),
    Column("unknown_processor_id", String(ID_LENGTH), nullable=True),
    PrimaryKeyConstraint("kind", "request_id", "fault"),
    CheckConstraint("kind IN ('charge', 'refund', 'payout')", name="kind"),
    CheckConstraint(f"fault IN ({_REPORT_FAULTS_SQL})", name="fault"),
    CheckConstraint(
        "(fault IN ('report_amount_delta', 'report_fee_delta')) = (value_minor IS NOT NULL)"
        " AND (value_minor IS NULL OR value_minor <> 0)",
        name="value_of_fault",
    ),
    CheckConstraint(
        "((fault = 'report_unknown_charge') = (unknown_request_id IS NOT NULL))"
        " AND ((unknown_request_id IS NULL) = (unknown_processor_id IS NULL))"
        " AND (fault <> 'report_unknown_charge' OR kind = 'charge')",
        name="unknown_charge",
    ),
    Index("ix_sandbox_report_faults_fault", "fault"),
)
