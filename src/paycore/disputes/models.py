"""Disputes (SPEC §6.2): one row per dispute the processor opened on a payment.

The row is made by the first evidence of the dispute that arrives (a webhook, a status query,
a report line), exactly once: `(tenant_id, processor_dispute_id)` is unique and every writer
inserts with ON CONFLICT DO NOTHING, then moves the row it holds under its lock. `withdrawn_minor`
and `reinstated_minor` say what the ledger moved for it (each at most once, by its transfer), so
the books can be checked against the disputes (`paycore.invariants.books`).
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
    UniqueConstraint,
    text,
)

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column
from paycore.lifecycle.columns import (
    ATTEMPTS,
    CLAIMED_BY,
    CLAIMED_UNTIL_US,
    NEXT_ATTEMPT_AT_US,
    WORKER_ID_LENGTH,
)

# A dispute waiting for the tenant's answer: a chargeback before its evidence, an inquiry open.
AWAITING_RESPONSE = "status IN ('needs_response', 'warning_needs_response')"

disputes = Table(
    "disputes",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("processor_dispute_id", String(128), nullable=False),
    Column("payment_id", String(ID_LENGTH), nullable=False),
    Column("type", String(16), nullable=False),
    Column("status", String(32), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("fee_minor", BigInteger, nullable=False),
    Column("evidence_due_by_us", BigInteger, nullable=False),
    Column("withdrawn_minor", BigInteger, nullable=False),
    Column("reinstated_minor", BigInteger, nullable=False),
    Column("withdrawal_transfer_id", String(ID_LENGTH), nullable=True),
    Column("reinstatement_transfer_id", String(ID_LENGTH), nullable=True),
    created_at_column(),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant_id", "id"),
    # The processor's id first (migration 0037): with tenant_id first, PostgreSQL's planner could
    # not tell this key from the other indexes leading with tenant_id on a table not analyzed.
    UniqueConstraint("processor_dispute_id", "tenant_id"),
    CheckConstraint(
        "status IN ('needs_response', 'under_review', 'won', 'lost', 'warning_needs_response', 'warning_closed')",
        name="status",
    ),
    CheckConstraint("type IN ('chargeback', 'inquiry')", name="type"),
    CheckConstraint("amount_minor > 0 AND amount_minor <= 9007199254740991", name="amount_minor"),
    CheckConstraint("fee_minor >= 0 AND withdrawn_minor >= 0 AND reinstated_minor >= 0", name="moved_minor"),
    Index("ix_disputes_status", "tenant_id", "status", "id"),
    Index("ix_disputes_payment", "tenant_id", "payment_id", "id"),
    Index("ix_disputes_id", "id", "tenant_id"),  # the console's search across tenants (migration 0041)
    # The disputes awaiting the tenant's answer, nearest deadline first: `/metrics` (migration
    # 0037). Partial: never the decided ones. The statuses are literals, as in the statement.
    Index(
        "ix_disputes_evidence_due",
        "evidence_due_by_us",
        "id",
        sqlite_where=text(AWAITING_RESPONSE),
        postgresql_where=text(AWAITING_RESPONSE),
    ),
)

# A tenant's answer (evidence or accept) whose reply from the processor was lost (migration
# 0038): the dispute a worker asks the processor about (`disputes.in_flight`), one row per
# dispute whatever the number of lost answers. Made in the transaction that records the lost
# call; deleted by `service.record` in the transaction where the processor's word (a webhook, a
# status query, a report line's query) shows the dispute takes no more answers. `id` is the
# dispute's id; the work columns are the lifecycle's (a lease, a schedule, the rounds so far).
dispute_answers_in_flight = Table(
    "dispute_answers_in_flight",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("processor_dispute_id", String(128), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("request_id", String(ID_LENGTH), nullable=False),
    Column(ATTEMPTS, Integer, nullable=False),
    Column(NEXT_ATTEMPT_AT_US, BigInteger, nullable=True),
    Column(CLAIMED_BY, String(WORKER_ID_LENGTH), nullable=True),
    Column(CLAIMED_UNTIL_US, BigInteger, nullable=True),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "id"),
    CheckConstraint("kind IN ('evidence', 'accept')", name="kind"),
    Index("ix_dispute_answers_in_flight_due", "next_attempt_at_us"),
)
