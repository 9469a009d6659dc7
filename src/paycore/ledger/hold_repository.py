"""The SQL a data-plane phase (ADR 0026) runs on SQLite to write a pending hold: each account's
pending totals moved and guarded, the transfer, its two entries. One home for the fixed lists
of `payments/accept_repository.py`, `refunds/create_repository.py` and
`payouts/create_repository.py`; each checks what `APPLY_PENDING` returns with
`paycore.ledger.limits`, as `paycore.ledger.postings._apply` does."""

from __future__ import annotations

from paycore.db import driver

# An account's pending totals moved by its entry, bounded before adding (`limits.bound_before_adding`).
APPLY_PENDING = driver.statement(
    "UPDATE ledger_accounts SET debits_pending_minor = debits_pending_minor + ?,"
    " credits_pending_minor = credits_pending_minor + ?, entries_count = entries_count + 1"
    " WHERE tenant_id = ? AND id = ? AND debits_pending_minor <= ? AND credits_pending_minor <= ?"
    " RETURNING code, currency, normal_balance, no_overdraft, system, debits_posted_minor, credits_posted_minor,"
    " debits_pending_minor, credits_pending_minor, entries_count"
)

TRANSFER_COLUMNS = (
    "tenant_id",
    "id",
    "kind",
    "pending_id",
    "reverses_id",
    "batch_id",
    "idempotency_key",
    "reference_type",
    "reference_id",
    "owner_id",
    "metadata",
    "expires_at_us",
    "created_at_us",
)
TRANSFER = driver.insert("ledger_transfers", TRANSFER_COLUMNS)
_ENTRY_COLUMNS = (
    "tenant_id, id, transfer_id, account_id, direction, amount_minor, currency, account_sequence, created_at_us"
)
ENTRY_PAIR = driver.statement(
    f"INSERT INTO ledger_entries ({_ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
