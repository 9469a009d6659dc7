"""The sandbox's dispute tables (SPEC §6.2), on the sandbox's MetaData (models.py).

- `sandbox_disputes`: one row per dispute, at most one per charge (a unique key: a retried
  admin call cannot open two). `status` is what the merchant sees (`needs_response`,
  `under_review`, `won`, `lost`; an inquiry's `warning_needs_response`, `warning_closed`);
  `sequence` is the number of its last event and the row's version: every change moves it by
  one, guarded on the value read, so of two changes racing one wins. `next_step_at_us` is when
  the background next acts on it (the evidence deadline, or the decision after evidence; NULL
  once closed). `withdrawn_at_us` is when the money left the merchant (a chargeback's opening,
  or an inquiry's escalation), `reinstated_at_us` when a won one brought it back: the settlement
  report's dispute lines are dated by them.
- `sandbox_dispute_actions`: one row per evidence or accept request id (the primary key is the
  dedupe), with the evidence's text; a refused one stores nothing.
- `sandbox_planned_disputes`: the tok_disputed charges that will be disputed, and when they
  succeeded (the dispute opens `dispute_open_after_ms` later); the row goes when it opens.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import BigInteger, Boolean, CheckConstraint, Column, ForeignKey, Index, Integer, String, Table, Text

from paycore_sandbox.limits import MERCHANT_ID_LENGTH_MAX, REQUEST_ID_LENGTH_MAX
from paycore_sandbox.models import ID_LENGTH, metadata

DISPUTE_STATUS_LENGTH: Final = 32
_OPEN = "('needs_response', 'under_review', 'warning_needs_response')"
_STATUSES = "('needs_response', 'under_review', 'won', 'lost', 'warning_needs_response', 'warning_closed')"

disputes = Table(
    "sandbox_disputes",
    metadata,
    Column("dispute_id", String(ID_LENGTH), primary_key=True),
    Column(
        "charge_request_id",
        String(REQUEST_ID_LENGTH_MAX),
        ForeignKey("sandbox_charges.request_id"),
        nullable=False,
        unique=True,
    ),
    Column("payment_reference", String(ID_LENGTH), nullable=False),
    Column("merchant_id", String(MERCHANT_ID_LENGTH_MAX), nullable=False),
    Column("type", String(16), nullable=False),
    Column("status", String(DISPUTE_STATUS_LENGTH), nullable=False),
    Column("reason", String(32), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("fee_minor", BigInteger, nullable=False),
    Column("evidence_due_by_us", BigInteger, nullable=False),
    Column("evidence_submitted_at_us", BigInteger, nullable=True),
    Column("planned_decision", String(8), nullable=True),  # won | lost, decided when evidence came
    Column("next_step_at_us", BigInteger, nullable=True),
    Column("sequence", Integer, nullable=False),
    Column("webhook_duplicate", Boolean, nullable=False),
    Column("webhook_reorder", Boolean, nullable=False),
    Column("created_at_us", BigInteger, nullable=False),
    Column("withdrawn_at_us", BigInteger, nullable=True),
    Column("reinstated_at_us", BigInteger, nullable=True),
    Column("closed_at_us", BigInteger, nullable=True),
    Column("updated_at_us", BigInteger, nullable=False),
    CheckConstraint("type IN ('chargeback', 'inquiry')", name="type"),
    CheckConstraint(f"status IN {_STATUSES}", name="status"),
    CheckConstraint("amount_minor > 0 AND fee_minor >= 0 AND sequence >= 1", name="amounts"),
    # An inquiry moves no money and costs nothing; a chargeback withdrew its amount when it opened.
    CheckConstraint(
        "(type = 'inquiry') = (status IN ('warning_needs_response', 'warning_closed'))", name="status_of_type"
    ),
    CheckConstraint("(type = 'chargeback') = (withdrawn_at_us IS NOT NULL)", name="withdrawn"),
    CheckConstraint("type = 'chargeback' OR fee_minor = 0", name="inquiry_free"),
    CheckConstraint("(status = 'won') = (reinstated_at_us IS NOT NULL)", name="reinstated"),
    CheckConstraint(f"(status IN {_OPEN}) = (next_step_at_us IS NOT NULL)", name="next_step"),
    CheckConstraint(f"(status IN {_OPEN}) = (closed_at_us IS NULL)", name="closed_at"),
    CheckConstraint("status <> 'under_review' OR planned_decision IS NOT NULL", name="under_review_decided"),
    CheckConstraint("(planned_decision IS NULL) = (evidence_submitted_at_us IS NULL)", name="decision_of_evidence"),
    CheckConstraint("planned_decision IS NULL OR planned_decision IN ('won', 'lost')", name="planned_decision"),
    Index("ix_sandbox_disputes_next_step_at_us", "next_step_at_us"),
    Index("ix_sandbox_disputes_withdrawn_at_us", "withdrawn_at_us"),
    Index("ix_sandbox_disputes_reinstated_at_us", "reinstated_at_us"),
)

dispute_actions = Table(
    "sandbox_dispute_actions",
    metadata,
    Column("request_id", String(REQUEST_ID_LENGTH_MAX), primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("merchant_id", String(MERCHANT_ID_LENGTH_MAX), nullable=False),
    Column("dispute_id", String(ID_LENGTH), ForeignKey("sandbox_disputes.dispute_id"), nullable=False),
    Column("text", Text, nullable=True),
    Column("created_at_us", BigInteger, nullable=False),
    CheckConstraint("kind IN ('evidence', 'accept')", name="kind"),
    CheckConstraint("(kind = 'evidence') = (text IS NOT NULL)", name="text_of_evidence"),
    Index("ix_sandbox_dispute_actions_dispute_id", "dispute_id"),
)

planned_disputes = Table(
    "sandbox_planned_disputes",
    metadata,
    Column(
        "charge_request_id", String(REQUEST_ID_LENGTH_MAX), ForeignKey("sandbox_charges.request_id"), primary_key=True
    ),
    Column("succeeded_at_us", BigInteger, nullable=False),
    Index("ix_sandbox_planned_disputes_succeeded_at_us", "succeeded_at_us"),
)
