"""The ledger's rules: balanced transfers, two-phase holds, reversals, overdraft flags.

Every function runs inside the caller's transaction (`Database.transaction`) and never
commits: the boundary (an HTTP request, a worker job) owns the transaction, so a transfer
and whatever caused it (a credit, an idempotency record) commit or roll back together.

This module is the ledger's front door: the account functions and value types are
re-exported here, so callers import from one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from paycore.kit import ids
from paycore.ledger import batch, repository
from paycore.ledger.accounts import (
    ListedAccount,
    create_account,
    ensure_account,
    ensure_accounts,
    find_account_by_code,
    find_listed_account,
    get_account,
    list_accounts,
    load_account_facts,
    remember_accounts,
    system_account_ids,
)
from paycore.ledger.errors import (
    ManagedTransfer,
    TransferExpired,
    TransferNotFound,
    TransferNotPending,
    TransferNotReversible,
)
from paycore.ledger.fees import (
    BANK_FEE_KINDS,
    FEE_KEYS_PER_READ_MAX,
    FEES_PER_CALL_MAX,
    BankFeeAccounts,
    FeesBooked,
    ProcessorFee,
    bank_fee_spec,
    book_processor_fee,
    book_processor_fees,
    booked_fees,
)
from paycore.ledger.postings import (
    check_spec,
    entry_totals,
    insert_resolution,
    post_entries,
    transfer_values,
    write_entries,
)
from paycore.ledger.transfer_reads import get_transfer, list_entries, transfer_of_rows, transfer_references
from paycore.ledger.types import (
    DIRECTIONS,
    REFERENCE_TYPES,
    RESOLUTION_STATUS,
    Account,
    AccountTemplate,
    Entry,
    EntrySpec,
    Transfer,
    TransferSpec,
    new_transfer_view,
)
from paycore.ledger.verify import recomputed_totals, verify

__all__ = [
    "BANK_FEE_KINDS",
    "DIRECTIONS",
    "FEES_PER_CALL_MAX",
    "FEE_KEYS_PER_READ_MAX",
    "REFERENCE_TYPES",
    "Account",
    "AccountTemplate",
    "BankFeeAccounts",
    "Entry",
    "EntrySpec",
    "FeesBooked",
    "ListedAccount",
    "ProcessorFee",
    "Transfer",
    "TransferSpec",
    "bank_fee_spec",
    "book_processor_fee",
    "book_processor_fees",
    "booked_fees",
    "create_account",
    "create_batch",
    "create_transfer",
    "ensure_account",
    "ensure_accounts",
    "entry_totals",
    "expire_due",
    "find_account_by_code",
    "find_listed_account",
    "get_account",
    "get_transfer",
    "list_accounts",
    "list_entries",
    "post_pending",
    "recomputed_totals",
    "remember_accounts",
    "reverse_transfer",
    "settle_pending",
    "system_account_ids",
    "transfer_references",
    "transfer_values",
    "verify",
    "void_pending",
]


def create_transfer(
    connection: Connection,
    tenant_id: str,
    spec: TransferSpec,
    *,
    now_us: int,
    idempotency_key: str | None = None,
    batch_id: str | None = None,
    param_prefix: str = "",
    known_accounts: Mapping[str, Account] | None = None,
) -> Transfer:
    """Write a balanced transfer. `known_accounts` (by id) saves reading accounts the caller
    has just read in this transaction; their immutable facts are all that is used."""
    account_rows = check_spec(connection, tenant_id, spec, param_prefix, known_accounts)
    transfer_id = ids.new_id("txn")
    kind = "pending" if spec.pending else "transfer"
    values = transfer_values(tenant_id, transfer_id, kind, spec, now_us, idempotency_key, batch_id)
    repository.insert_transfer(connection, values)
    entry_rows = write_entries(
        connection,
        tenant_id,
        transfer_id,
        spec.entries,
        account_rows,
        now_us,
        pending=spec.pending,
        prefix=param_prefix,
        guarded=spec.guard_available,
        overdraft_allowed=spec.overdraft_allowed,
    )
    return new_transfer_view(values, entry_rows)


def post_pending(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    *,
    amount_minor: int | None,
    now_us: int,
    owner_id: str | None,
) -> Transfer:
    """Post a pending transfer (in full, or `amount_minor` of it). `owner_id`: the flow object
    this is done for, None for the tenant (the ledger API); see `_check_owner`."""
    _post(connection, tenant_id, transfer_id, amount_minor, now_us, owner_id)
    return get_transfer(connection, tenant_id, transfer_id)


def void_pending(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    *,
    now_us: int,
    owner_id: str | None,
) -> Transfer:
    _void(connection, tenant_id, transfer_id, "void", now_us, owner_id)
    return get_transfer(connection, tenant_id, transfer_id)


def settle_pending(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    *,
    post: bool,
    now_us: int,
    owner_id: str,
    amount_minor: int | None = None,
) -> None:
    """Post (in full, or `amount_minor` of it, the rest released in the same step) or void a
    flow's pending transfer, for callers that need no view of it after: the same rules as
    post_pending/void_pending, without reading the transfer back."""
    if post:
        _post(connection, tenant_id, transfer_id, amount_minor, now_us, owner_id)
    else:
        _void(connection, tenant_id, transfer_id, "void", now_us, owner_id)


def _post(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    amount_minor: int | None,
    now_us: int,
    owner_id: str | None,
) -> None:
    pending = _unresolved_pending(connection, tenant_id, transfer_id, owner_id)
    if pending.expires_at_us is not None and now_us >= pending.expires_at_us:
        raise TransferExpired("the pending transfer has expired and can no longer be posted")
    posted_entries = post_entries(pending, amount_minor)
    resolution_id = ids.new_id("txn")
    insert_resolution(connection, tenant_id, resolution_id, "post", pending, now_us)
    account_rows = load_account_facts(connection, tenant_id, [e.account_id for e in pending.entries])
    write_entries(connection, tenant_id, resolution_id, posted_entries, account_rows, now_us, released=pending.entries)


def _void(
    connection: Connection, tenant_id: str, transfer_id: str, kind: str, now_us: int, owner_id: str | None
) -> None:
    assert kind in ("void", "expire"), kind
    pending = _unresolved_pending(connection, tenant_id, transfer_id, owner_id)
    insert_resolution(connection, tenant_id, ids.new_id("txn"), kind, pending, now_us)
    account_rows = load_account_facts(connection, tenant_id, [e.account_id for e in pending.entries])
    write_entries(connection, tenant_id, pending.id, (), account_rows, now_us, released=pending.entries)


def _check_owner(transfer: Any, owner_id: str | None) -> None:
    """Only a transfer's owner resolves or reverses it: a flow's transfer (a payment's hold, a
    payout's post) moves as that flow's state machine decides, never by the tenant's ledger
    API (ManagedTransfer, naming the owner); a flow acting on another's transfer is a bug.
    The database holds the same rule (the trigger `ledger_transfers_owner`, migration 0024)."""
    if transfer.owner_id == owner_id:
        return
    assert owner_id is None, f"{owner_id} acted on transfer {transfer.id} of {transfer.owner_id}"
    raise ManagedTransfer(
        f"transfer {transfer.id} belongs to {transfer.owner_id}: only that object's own operations move it",
        param="id",
        owner_id=transfer.owner_id,
    )


def reverse_transfer(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    *,
    now_us: int,
    owner_id: str | None,
    metadata: dict[str, str] | None = None,
) -> Transfer:
    """A new transfer that undoes a posted one; `owner_id` as for `post_pending`."""
    original = get_transfer(connection, tenant_id, transfer_id)
    _check_owner(original, owner_id)
    if original.kind == "pending" and original.status == "posted":
        # A posted hold reads as `posted`, so its id must reverse it too: what moved the
        # money is its post, and reversing that one transfer (whichever id was given) lets
        # the unique reverses_id keep "at most one reversal" true.
        assert original.resolved_by is not None, original.id
        original = get_transfer(connection, tenant_id, original.resolved_by)
    if original.kind not in ("transfer", "post"):
        raise TransferNotReversible(
            f"a {original.status} {original.kind} transfer moved no posted money to reverse"
            " (an open hold is voided, not reversed)"
        )
    flipped = tuple(
        EntrySpec(e.account_id, "credit" if e.direction == "debit" else "debit", e.amount_minor)
        for e in original.entries
    )
    spec = TransferSpec(
        entries=flipped,
        metadata=metadata if metadata is not None else original.metadata,
        reference_type=original.reference_type,
        reference_id=original.reference_id,
        owner_id=original.owner_id,
    )
    account_rows = check_spec(connection, tenant_id, spec, "")
    reversal_id = ids.new_id("txn")
    values = transfer_values(tenant_id, reversal_id, "transfer", spec, now_us, None, None)
    values["reverses_id"] = original.id
    if not repository.insert_reversal(connection, values):
        raise TransferNotReversible("the transfer has already been reversed")
    entry_rows = write_entries(connection, tenant_id, reversal_id, spec.entries, account_rows, now_us)
    return new_transfer_view(values, entry_rows)


def create_batch(
    connection: Connection,
    tenant_id: str,
    specs: Sequence[TransferSpec],
    *,
    now_us: int,
    idempotency_key: str | None,
) -> tuple[str, list[Transfer]]:
    """All transfers apply or none: they share the caller's transaction, which the caller
    rolls back on an error. Written as one call on PostgreSQL (`paycore.ledger.batch`)."""
    batch_id = ids.new_id("batch")
    created = batch.write_batch(connection, tenant_id, specs, now_us=now_us, batch_id=batch_id)
    del idempotency_key  # the batch's key lives in the idempotency record, not on each transfer
    return batch_id, created


def expire_due(connection: Connection, *, now_us: int, limit: int) -> int:
    """Void (as `expired`) up to `limit` of the tenants' own pending transfers whose expiry has
    passed (a flow's hold is resolved by its flow, never by this clock).

    Safe to run from several workers at once: the resolution insert is unique per pending
    transfer, so a second worker's attempt finds it resolved and moves on."""
    expired = 0
    for row in repository.due_expired_pending(connection, now_us, limit):
        try:
            _void(connection, row.tenant_id, row.id, "expire", now_us, None)
            expired += 1
        except TransferNotPending:
            continue
    return expired


def oldest_expiry_due_us(connection: Connection, *, now_us: int) -> int | None:
    """When the oldest pending transfer the expiry job should have voided by now expired."""
    return repository.oldest_expiry_due_us(connection, now_us)


def _unresolved_pending(connection: Connection, tenant_id: str, transfer_id: str, owner_id: str | None) -> Transfer:
    """The pending transfer, read with whether it is resolved and with its entries in one
    statement: what posting or voiding needs, no more. Its owner's question first: whose it
    is comes before whether it is still pending."""
    row, entry_rows = repository.get_transfer_with_resolution(connection, tenant_id, transfer_id)
    if row is None:
        raise TransferNotFound("no such transfer", param="id")
    _check_owner(row, owner_id)
    if row.kind == "pending":
        status = "pending" if row.resolution_kind is None else RESOLUTION_STATUS[row.resolution_kind]
    else:
        status = RESOLUTION_STATUS.get(row.kind, "posted")
    if status != "pending":
        raise TransferNotPending(f"the transfer is {status}, not pending", status=status)
    return transfer_of_rows(row, entry_rows, "pending", None, None)
