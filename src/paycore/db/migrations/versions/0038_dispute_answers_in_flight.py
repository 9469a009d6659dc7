"""A dispute answer whose reply was lost, kept for the worker to ask about (ADR 0030
decision 6): the table `dispute_answers_in_flight`.

One row per dispute with a tenant's answer (evidence or accept) sent to the processor whose
reply never came (`paycore.disputes.models`): made in the transaction that records the lost
call, claimed by the worker's `resolve_dispute_answers` round (a lease, FOR UPDATE SKIP LOCKED
on PostgreSQL), deleted in the transaction where the processor's word shows the dispute takes
no more answers. Its due index is the worker's one read.

This release writes the table whenever an answer's reply is lost and deletes from it whenever
it records a dispute, so OLDEST_COMPATIBLE_REVISION is 0038: migrate first, then roll the
code out. The release before never reads it. Downgrade drops it (roll the code back first):
the answers in flight are then settled only by webhooks, a retry or `refresh`, as before.

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-06 13:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dispute_answers_in_flight",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("processor_dispute_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at_us", sa.BigInteger(), nullable=True),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("claimed_until_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_dispute_answers_in_flight")),
        sa.CheckConstraint("kind IN ('evidence', 'accept')", name=op.f("ck_dispute_answers_in_flight_kind")),
    )
    op.create_index("ix_dispute_answers_in_flight_due", "dispute_answers_in_flight", ["next_attempt_at_us"])


def downgrade() -> None:
    op.drop_index("ix_dispute_answers_in_flight_due", table_name="dispute_answers_in_flight")
    op.drop_table("dispute_answers_in_flight")
