"""Payouts (SPEC §11) and their adjustments.

A payout's status changes only through `paycore.payouts.transitions` (one transition table in
`states`), by compare-and-set on the stored status; the CHECK constraint below refuses any
status the table does not know. Every change, every bank call (attempt) and every API result
is a row of the append-only `events` table.

`payout_adjustments` are the money that moved because of a payout after it was sent: the
bank's fees, returns, chargebacks of the funding and their reversals, recoveries, fee
reversals, refunds. Each row has its ledger transfer and is never updated or deleted
(database triggers, migration 0004); a correction is a new row of the opposite kind.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column
from paycore.lifecycle.columns import faulted_index, tenant_due_index, work_columns

payouts = Table(
    "payouts",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("rail", String(8), nullable=False),
    Column("source_account_id", String(ID_LENGTH), nullable=False),
    Column("beneficiary_name", String(140), nullable=False),
    Column("iban", String(34), nullable=True),
    Column("bic", String(11), nullable=True),
    Column("routing_number", String(9), nullable=True),
    Column("account_number", String(17), nullable=True),
    Column("execute_on", String(10), nullable=False),  # YYYY-MM-DD, UTC
    Column("metadata", Text, nullable=False),  # JSON object
    Column("status", String(16), nullable=False),
    Column("failure_code", String(64), nullable=True),
    Column("return_code", String(16), nullable=True),
    Column("transfer_id", String(ID_LENGTH), nullable=False),  # the hold: source -> in transit
    Column("bank_reference", String(128), nullable=True),
    Column("batch_id", String(128), nullable=True),
    *work_columns(),  # attempts, next_attempt_at_us, claimed_by, claimed_until_us, ... (lifecycle.columns)
    Column("sent_at_us", BigInteger, nullable=True),
    Column("settled_at_us", BigInteger, nullable=True),
    Column("returned_at_us", BigInteger, nullable=True),
    created_at_column(),
    Column("updated_at_us", BigInteger, nullable=False),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "idempotency_key"),
    CheckConstraint(
        # `succeeded` is the stored name of the public `settled` (states.py; migrations 0005-0007).
        "status IN ('scheduled', 'queued', 'processing', 'in_doubt', 'sent', 'succeeded', 'failed', 'returned',"
        " 'canceled')",
        name="status",
    ),
    CheckConstraint("rail IN ('ach', 'sepa')", name="rail"),
    CheckConstraint("amount_minor > 0 AND amount_minor <= 9007199254740991", name="amount_minor"),
    CheckConstraint("(iban IS NULL) <> (account_number IS NULL)", name="one_beneficiary_account"),
    Index("ix_payouts_status", "tenant_id", "status", "id"),
    Index("ix_payouts_due", "status", "execute_on"),
    Index("ix_payouts_next_attempt", "status", "next_attempt_at_us"),
    Index("ix_payouts_sent", "sent_at_us"),  # the overview's money out, by time (migration 0040)
    # The console's search across tenants (migration 0041).
    Index("ix_payouts_id", "id", "tenant_id"),
    Index("ix_payouts_bank_reference", "bank_reference", "tenant_id"),
    Index("ix_payouts_idempotency_key", "idempotency_key", "tenant_id"),
    tenant_due_index("payouts"),  # a tenant's part of the queue, claimed (migration 0044)
    # The scheduled payouts queued tenant by tenant (0044). Partial: never the history, and never
    # an index a tenant's other lookups (the console's search) could mistake for theirs.
    Index(
        "ix_payouts_tenant_due",
        "tenant_id",
        "execute_on",
        "id",
        sqlite_where=text("status = 'scheduled'"),
        postgresql_where=text("status = 'scheduled'"),
    ),
    faulted_index("payouts"),  # the items a worker could not move (migration 0022)
)

ADJUSTMENT_KINDS = (
    "fee",
    "fee_reversal",
    "return",
    "return_fee",
    "chargeback",
    "chargeback_reversal",
    "recovery",
    "refund",
)

payout_adjustments = Table(
    "payout_adjustments",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("payout_id", String(ID_LENGTH), nullable=False),
    Column("kind", String(24), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("code", String(16), nullable=True),  # a return's R-code or SEPA reason code
    Column("effective_on", String(10), nullable=False),  # YYYY-MM-DD: the day the money moved
    Column("source", String(8), nullable=False),  # bank | api
    # One row per fact: "bank:fee", "bank:return", ..., or "key:<Idempotency-Key>" from the API.
    Column("dedupe_key", String(300), nullable=False),
    Column("transfer_id", String(ID_LENGTH), nullable=False),
    Column("note", Text, nullable=True),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "payout_id", "dedupe_key"),
    CheckConstraint(
        "kind IN ('fee', 'fee_reversal', 'return', 'return_fee', 'chargeback', 'chargeback_reversal',"
        " 'recovery', 'refund')",
        name="kind",
    ),
    CheckConstraint("source IN ('bank', 'api')", name="source"),
    CheckConstraint("amount_minor > 0 AND amount_minor <= 9007199254740991", name="amount_minor"),
    # Both cover the loss report (src/paycore/reports/losses.py): kind and amount_minor make its
    # scans index-only. By day for short ranges; by payout for long ones (already grouped) and
    # for one payout's adjustments in a range (two equalities and the range: SQLite, without
    # ANALYZE statistics, then prefers it to the by-day index).
    Index("ix_payout_adjustments_effective", "tenant_id", "effective_on", "payout_id", "kind", "amount_minor"),
    Index("ix_payout_adjustments_payout", "tenant_id", "payout_id", "effective_on", "kind", "amount_minor"),
)
