"""Initial schema: ledger, idempotency keys, tenant credits, tenants and API keys.

The ledger's transfers and entries are append-only, enforced here by triggers on both
databases; on PostgreSQL a deferred constraint trigger also refuses, at commit, a transfer
whose entries do not balance per currency.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 11:20:30.435588
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "credits",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("lines", sa.Text(), nullable=False),
        sa.Column("transfer_id", sa.String(length=64), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_credits")),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name=op.f("uq_credits_tenant_id_idempotency_key")),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "key", name=op.f("pk_idempotency_keys")),
    )
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.create_index("ix_idempotency_keys_expiry", ["expires_at_us"], unique=False)

    op.create_table(
        "ledger_accounts",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("code", sa.String(length=128), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("normal_balance", sa.String(length=6), nullable=False),
        sa.Column("no_overdraft", sa.Boolean(), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("debits_posted_minor", sa.BigInteger(), nullable=False),
        sa.Column("credits_posted_minor", sa.BigInteger(), nullable=False),
        sa.Column("debits_pending_minor", sa.BigInteger(), nullable=False),
        sa.Column("credits_pending_minor", sa.BigInteger(), nullable=False),
        sa.Column("entries_count", sa.BigInteger(), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("normal_balance IN ('debit', 'credit')", name=op.f("ck_ledger_accounts_normal_balance")),
        sa.CheckConstraint(
            "debits_posted_minor >= 0 AND credits_posted_minor >= 0 AND debits_pending_minor >= 0 AND credits_pending_minor >= 0",
            name=op.f("ck_ledger_accounts_totals_non_negative"),
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_ledger_accounts")),
        sa.UniqueConstraint("tenant_id", "code", name=op.f("uq_ledger_accounts_tenant_id_code")),
    )
    op.create_table(
        "ledger_transfers",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("pending_id", sa.String(length=64), nullable=True),
        sa.Column("reverses_id", sa.String(length=64), nullable=True),
        sa.Column("batch_id", sa.String(length=64), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("reference_type", sa.String(length=16), nullable=False),
        sa.Column("reference_id", sa.String(length=64), nullable=True),
        sa.Column("metadata", sa.Text(), nullable=False),
        sa.Column("expires_at_us", sa.BigInteger(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "(kind IN ('post', 'void', 'expire')) = (pending_id IS NOT NULL)",
            name=op.f("ck_ledger_transfers_pending_id_iff_resolution"),
        ),
        sa.CheckConstraint(
            "kind IN ('transfer', 'pending', 'post', 'void', 'expire')",
            name=op.f("ck_ledger_transfers_kind"),
        ),
        sa.CheckConstraint(
            "reference_type IN ('payment', 'refund', 'payout', 'credit', 'adjustment')",
            name=op.f("ck_ledger_transfers_reference_type"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "pending_id"],
            ["ledger_transfers.tenant_id", "ledger_transfers.id"],
            name=op.f("fk_ledger_transfers_tenant_id_pending_id_ledger_transfers"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "reverses_id"],
            ["ledger_transfers.tenant_id", "ledger_transfers.id"],
            name=op.f("fk_ledger_transfers_tenant_id_reverses_id_ledger_transfers"),
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_ledger_transfers")),
        sa.UniqueConstraint(
            "tenant_id",
            "idempotency_key",
            name=op.f("uq_ledger_transfers_tenant_id_idempotency_key"),
        ),
        sa.UniqueConstraint("tenant_id", "pending_id", name=op.f("uq_ledger_transfers_tenant_id_pending_id")),
        sa.UniqueConstraint("tenant_id", "reverses_id", name=op.f("uq_ledger_transfers_tenant_id_reverses_id")),
    )
    with op.batch_alter_table("ledger_transfers", schema=None) as batch_op:
        batch_op.create_index("ix_ledger_transfers_pending_expiry", ["kind", "expires_at_us"], unique=False)

    op.create_table(
        "tenants",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_tenants")),
    )
    op.create_table(
        "ledger_entries",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("transfer_id", sa.String(length=64), nullable=False),
        sa.Column("account_id", sa.String(length=64), nullable=False),
        sa.Column("direction", sa.String(length=6), nullable=False),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("account_sequence", sa.BigInteger(), nullable=False),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("direction IN ('debit', 'credit')", name=op.f("ck_ledger_entries_direction")),
        sa.CheckConstraint(
            "amount_minor > 0 AND amount_minor <= 9007199254740991",
            name=op.f("ck_ledger_entries_amount_minor"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "account_id"],
            ["ledger_accounts.tenant_id", "ledger_accounts.id"],
            name=op.f("fk_ledger_entries_tenant_id_account_id_ledger_accounts"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "transfer_id"],
            ["ledger_transfers.tenant_id", "ledger_transfers.id"],
            name=op.f("fk_ledger_entries_tenant_id_transfer_id_ledger_transfers"),
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_ledger_entries")),
        sa.UniqueConstraint(
            "tenant_id",
            "account_id",
            "account_sequence",
            name=op.f("uq_ledger_entries_tenant_id_account_id_account_sequence"),
        ),
    )
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.create_index("ix_ledger_entries_transfer", ["tenant_id", "transfer_id"], unique=False)

    _create_append_only_triggers()


def downgrade() -> None:
    _drop_append_only_triggers()
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_ledger_entries_transfer")

    op.drop_table("ledger_entries")
    op.drop_table("tenants")
    with op.batch_alter_table("ledger_transfers", schema=None) as batch_op:
        batch_op.drop_index("ix_ledger_transfers_pending_expiry")

    op.drop_table("ledger_transfers")
    op.drop_table("ledger_accounts")
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_idempotency_keys_expiry")

    op.drop_table("idempotency_keys")
    op.drop_table("credits")
    op.drop_table("api_keys")


_APPEND_ONLY_TABLES = ("ledger_transfers", "ledger_entries")


def _create_append_only_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            """
            CREATE FUNCTION paycore_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
                    USING ERRCODE = 'restrict_violation';
            END $$
            """
        )
        op.execute(
            """
            CREATE FUNCTION paycore_check_transfer_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF EXISTS (
                    SELECT 1 FROM ledger_entries
                    WHERE tenant_id = NEW.tenant_id AND transfer_id = NEW.transfer_id
                    GROUP BY currency
                    HAVING SUM(CASE direction WHEN 'debit' THEN amount_minor ELSE -amount_minor END) <> 0
                ) THEN
                    RAISE EXCEPTION 'transfer % does not balance', NEW.transfer_id
                        USING ERRCODE = 'check_violation';
                END IF;
                RETURN NULL;
            END $$
            """
        )
        for table in _APPEND_ONLY_TABLES:
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION paycore_refuse_change()"
            )
            op.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION paycore_refuse_change()"
            )
        op.execute(
            "CREATE CONSTRAINT TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
            "EXECUTE FUNCTION paycore_check_transfer_balanced()"
        )
        return
    for table in _APPEND_ONLY_TABLES:
        for operation in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: {operation} refused'); END"
            )


def _drop_append_only_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER ledger_entries_balanced ON ledger_entries")
        for table in _APPEND_ONLY_TABLES:
            op.execute(f"DROP TRIGGER {table}_append_only ON {table}")
            op.execute(f"DROP TRIGGER {table}_no_truncate ON {table}")
        op.execute("DROP FUNCTION paycore_check_transfer_balanced()")
        op.execute("DROP FUNCTION paycore_refuse_change()")
        return
    for table in _APPEND_ONLY_TABLES:
        for operation in ("update", "delete"):
            op.execute(f"DROP TRIGGER {table}_no_{operation}")
