"""The ledger's tables.

An **account** belongs to one tenant and holds one currency. A **transfer** is one atomic,
balanced movement made of two or more **entries**; each entry debits or credits one account
by a positive amount of minor units. For every transfer and currency, debits = credits.

Transfers and entries are append-only (database triggers refuse UPDATE and DELETE, see the
first migration). A two-phase transfer is a `pending` transfer; it is resolved exactly once
by a later `post`, `void` or `expire` transfer whose `pending_id` points at it (a unique
index makes "exactly once" the database's job). A reversal is a new transfer with
`reverses_id` (also unique). So a transfer's status is derived, never updated.

A system account (`system`: the chart of accounts, `chart.py`) is paycore's own; a transfer made
by a flow (a payment, refund, payout, credit, or a reconciliation run's fees) carries its
**owner** (`owner_id`: the flow object's id), which its resolutions and reversals inherit. The
database refuses an entry on a system account whose transfer has no owner, and a post, void,
expiry or reversal whose owner is not its target's (triggers: migration 0024), so a tenant's
own transfers (owner NULL) can neither move paycore's accounts nor resolve a flow's hold.

Accounts carry cached totals (TigerBeetle's four: debits/credits, posted/pending) and their
entry count, updated in the same transaction as the entries; `paycore ledger verify`
recomputes them. Each entry carries its account's next sequence number, taken under the
account's row lock, so an account's statement in sequence order is its commit order.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKeyConstraint,
    Index,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column

AMOUNT_CHECK = "amount_minor > 0 AND amount_minor <= 9007199254740991"

# _ONE_INDEX_FOR_THE_KEY: a lookup by (tenant_id, id) must have one index to choose, the
# primary key's. PostgreSQL plans the foreign key checks of every entry INSERT (and the
# driver's prepared statements) once per connection, as generic plans; on a table that is
# small and not yet analyzed, any other index leading with tenant_id costs the same, and the
# planner picked one (tenant_id, reverses_id), then read every transfer of the tenant for each
# entry for as long as the connection lived (docs/benchmarks.md, "The foreign keys' plans").
# So the ledger's other unique keys lead with their own column, or are partial: "unique where
# present", which also skips the index entries of the transfers that have no such column.


def _unique_where_present(table: str, column: str) -> Index:
    return Index(
        f"uq_{table}_tenant_id_{column}",
        "tenant_id",
        column,
        unique=True,
        sqlite_where=text(f"{column} IS NOT NULL"),
        postgresql_where=text(f"{column} IS NOT NULL"),
    )


accounts = Table(
    "ledger_accounts",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("code", String(128), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("normal_balance", String(6), nullable=False),
    Column("no_overdraft", Boolean, nullable=False),
    # paycore's own account (chart.py), created by `ensure_account(s)`; never the tenant's.
    Column("system", Boolean, nullable=False, server_default=false()),
    Column("metadata", Text, nullable=False),
    Column("debits_posted_minor", BigInteger, nullable=False),
    Column("credits_posted_minor", BigInteger, nullable=False),
    Column("debits_pending_minor", BigInteger, nullable=False),
    Column("credits_pending_minor", BigInteger, nullable=False),
    # How many entries the account has: the next entry's account_sequence is this plus one.
    Column("entries_count", BigInteger, nullable=False),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "id"),
    # Code first, not tenant_id: see _ONE_INDEX_FOR_THE_KEY above.
    UniqueConstraint("code", "tenant_id"),
    CheckConstraint("normal_balance IN ('debit', 'credit')", name="normal_balance"),
    CheckConstraint(
        "debits_posted_minor >= 0 AND credits_posted_minor >= 0"
        " AND debits_pending_minor >= 0 AND credits_pending_minor >= 0",
        name="totals_non_negative",
    ),
)

transfers = Table(
    "ledger_transfers",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("pending_id", String(ID_LENGTH), nullable=True),
    Column("reverses_id", String(ID_LENGTH), nullable=True),
    Column("batch_id", String(ID_LENGTH), nullable=True),
    Column("idempotency_key", String(255), nullable=True),
    Column("reference_type", String(16), nullable=False),
    Column("reference_id", String(ID_LENGTH), nullable=True),
    # The flow object that owns the transfer (pay_, rf_, po_, cr_, rcn_...); NULL: the tenant's
    # own, made through the ledger API. Set by the flow's code, never from a request.
    Column("owner_id", String(ID_LENGTH), nullable=True),
    Column("metadata", Text, nullable=False),
    Column("expires_at_us", BigInteger, nullable=True),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "id"),
    *(_unique_where_present("ledger_transfers", column) for column in ("pending_id", "reverses_id", "idempotency_key")),
    ForeignKeyConstraint(["tenant_id", "pending_id"], ["ledger_transfers.tenant_id", "ledger_transfers.id"]),
    ForeignKeyConstraint(["tenant_id", "reverses_id"], ["ledger_transfers.tenant_id", "ledger_transfers.id"]),
    CheckConstraint("kind IN ('transfer', 'pending', 'post', 'void', 'expire')", name="kind"),
    CheckConstraint(
        "(kind IN ('post', 'void', 'expire')) = (pending_id IS NOT NULL)",
        name="pending_id_iff_resolution",
    ),
    CheckConstraint(
        "reference_type IN ('payment', 'refund', 'payout', 'credit', 'adjustment')",
        name="reference_type",
    ),
    Index("ix_ledger_transfers_pending_expiry", "kind", "expires_at_us"),
    # The invariant checks' "moved twice" lookups (paycore.invariants, migration 0011): the
    # transfers of one payment or payout. Led by its own column and partial (see above).
    Index(
        "ix_ledger_transfers_reference",
        "reference_id",
        "tenant_id",
        sqlite_where=text("reference_type IN ('payment', 'payout')"),
        postgresql_where=text("reference_type IN ('payment', 'payout')"),
    ),
)

entries = Table(
    "ledger_entries",
    metadata,
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("transfer_id", String(ID_LENGTH), nullable=False),
    Column("account_id", String(ID_LENGTH), nullable=False),
    Column("direction", String(6), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    # 1, 2, 3, ... per account, handed out under the account's row lock, so statement order is
    # commit order: a client paging by it never misses an entry committed after its cursor.
    Column("account_sequence", BigInteger, nullable=False),
    created_at_column(),
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("tenant_id", "account_id", "account_sequence"),
    ForeignKeyConstraint(["tenant_id", "transfer_id"], ["ledger_transfers.tenant_id", "ledger_transfers.id"]),
    ForeignKeyConstraint(["tenant_id", "account_id"], ["ledger_accounts.tenant_id", "ledger_accounts.id"]),
    CheckConstraint("direction IN ('debit', 'credit')", name="direction"),
    CheckConstraint(AMOUNT_CHECK, name="amount_minor"),
    Index("ix_ledger_entries_transfer", "tenant_id", "transfer_id"),
)
