"""The ledger's rules: balanced transfers, two-phase holds, reversals, overdraft flags.

Every function runs inside the caller's transaction (`Database.transaction`) and never
commits: the boundary (an HTTP request, a worker job) owns the transaction, so a transfer
and whatever caused it (a credit, an idempotency record) commit or roll back together.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Row

from paycore.kit import ids
from paycore.kit.errors import InvalidAmount, InvalidRequest, UnsupportedCurrency
from paycore.kit.money import AMOUNT_MINOR_MAX, BALANCE_MINOR_MAX, is_known_currency
from paycore.ledger import repository
from paycore.ledger.balances import Balance, Totals, balance_of, breaks_no_overdraft
from paycore.ledger.errors import (
    AccountExists,
    AccountNotFound,
    BalanceOverflow,
    CurrencyMismatch,
    InsufficientFunds,
    InvalidEntries,
    PartialPostUnsupported,
    PostAmountExceedsPending,
    TransferExpired,
    TransferNotFound,
    TransferNotPending,
    TransferNotReversible,
    UnbalancedTransfer,
)

DIRECTIONS = ("debit", "credit")
REFERENCE_TYPES = ("payment", "refund", "payout", "credit", "adjustment")
_RESOLUTION_STATUS = {"post": "posted", "void": "voided", "expire": "expired"}


@dataclass(frozen=True)
class EntrySpec:
    account_id: str
    direction: str
    amount_minor: int


@dataclass(frozen=True)
class TransferSpec:
    entries: tuple[EntrySpec, ...]
    pending: bool = False
    currency: str | None = None  # when given, every account must hold this currency
    expires_at_us: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    reference_type: str = "adjustment"
    reference_id: str | None = None


@dataclass(frozen=True)
class Account:
    id: str
    code: str
    currency: str
    normal_balance: str
    no_overdraft: bool
    metadata: dict[str, str]
    created_at_us: int
    balance: Balance


@dataclass(frozen=True)
class Entry:
    id: str
    transfer_id: str
    account_id: str
    direction: str
    amount_minor: int
    currency: str
    account_sequence: int
    created_at_us: int


@dataclass(frozen=True)
class Transfer:
    id: str
    kind: str
    status: str
    entries: tuple[Entry, ...]
    pending_id: str | None
    reverses_id: str | None
    batch_id: str | None
    reference_type: str
    reference_id: str | None
    metadata: dict[str, str]
    expires_at_us: int | None
    created_at_us: int
    resolved_by: str | None = None
    posted_minor: int | None = None


# ---------------------------------------------------------------------------- accounts


def create_account(
    connection: Connection,
    tenant_id: str,
    *,
    code: str,
    currency: str,
    normal_balance: str,
    no_overdraft: bool,
    metadata: dict[str, str],
    now_us: int,
) -> Account:
    assert normal_balance in DIRECTIONS, normal_balance
    if not is_known_currency(currency):
        raise UnsupportedCurrency(f"currency {currency!r} is not supported", param="currency")
    values = {
        "tenant_id": tenant_id,
        "id": ids.new_id("acct"),
        "code": code,
        "currency": currency,
        "normal_balance": normal_balance,
        "no_overdraft": no_overdraft,
        "metadata": json.dumps(metadata, sort_keys=True),
        "debits_posted_minor": 0,
        "credits_posted_minor": 0,
        "debits_pending_minor": 0,
        "credits_pending_minor": 0,
        "entries_count": 0,
        "created_at_us": now_us,
    }
    if not repository.insert_account(connection, values):
        raise AccountExists(f"an account with code {code!r} already exists", param="code")
    return _account(repository.get_account(connection, tenant_id, str(values["id"])))


def ensure_account(
    connection: Connection,
    tenant_id: str,
    *,
    code: str,
    currency: str,
    normal_balance: str,
    no_overdraft: bool,
    now_us: int,
) -> Account:
    """Get the account with this code, creating it if it does not exist (safe under races:
    the unique (tenant_id, code) constraint picks one winner)."""
    row = repository.get_account_by_code(connection, tenant_id, code)
    if row is None:
        try:
            return create_account(
                connection,
                tenant_id,
                code=code,
                currency=currency,
                normal_balance=normal_balance,
                no_overdraft=no_overdraft,
                metadata={},
                now_us=now_us,
            )
        except AccountExists:
            row = repository.get_account_by_code(connection, tenant_id, code)
    account = _account(row)
    assert account.currency == currency and account.normal_balance == normal_balance, code
    return account


@dataclass(frozen=True)
class AccountTemplate:
    code: str
    currency: str
    normal_balance: str
    no_overdraft: bool


def ensure_accounts(
    connection: Connection, tenant_id: str, templates: Sequence[AccountTemplate], *, now_us: int
) -> dict[str, Account]:
    """The accounts with these codes, by code, created where missing: one SELECT when they
    all exist (the common case), so system accounts cost no extra round trips."""
    rows = repository.get_accounts_by_codes(connection, tenant_id, [t.code for t in templates])
    found = {code: _account(row) for code, row in rows.items()}
    for template in templates:
        if template.code not in found:
            found[template.code] = ensure_account(
                connection,
                tenant_id,
                code=template.code,
                currency=template.currency,
                normal_balance=template.normal_balance,
                no_overdraft=template.no_overdraft,
                now_us=now_us,
            )
        account = found[template.code]
        assert (account.currency, account.normal_balance) == (template.currency, template.normal_balance)
    return found


def get_account(connection: Connection, tenant_id: str, account_id: str) -> Account:
    return _account(repository.get_account(connection, tenant_id, account_id))


def find_account_by_code(connection: Connection, tenant_id: str, code: str) -> Account | None:
    row = repository.get_account_by_code(connection, tenant_id, code)
    return None if row is None else _account(row)


def _accounts(connection: Connection, tenant_id: str, account_ids: Iterable[str]) -> dict[str, Account]:
    return {
        account_id: _account(row)
        for account_id, row in repository.get_accounts(connection, tenant_id, account_ids).items()
    }


def _account(row: Row[Any] | None) -> Account:
    if row is None:
        raise AccountNotFound("no such account", param="account_id")
    totals = Totals(
        row.debits_posted_minor,
        row.credits_posted_minor,
        row.debits_pending_minor,
        row.credits_pending_minor,
    )
    return Account(
        id=row.id,
        code=row.code,
        currency=row.currency,
        normal_balance=row.normal_balance,
        no_overdraft=bool(row.no_overdraft),
        metadata=json.loads(row.metadata),
        created_at_us=row.created_at_us,
        balance=balance_of(totals, row.normal_balance),
    )


# ---------------------------------------------------------------------------- transfers


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
    account_rows = _check_spec(connection, tenant_id, spec, param_prefix, known_accounts)
    transfer_id = ids.new_id("txn")
    kind = "pending" if spec.pending else "transfer"
    values = _transfer_values(tenant_id, transfer_id, kind, spec, now_us, idempotency_key, batch_id)
    repository.insert_transfer(connection, values)
    entry_rows = _write_entries(
        connection,
        tenant_id,
        transfer_id,
        spec.entries,
        account_rows,
        now_us,
        pending=spec.pending,
        prefix=param_prefix,
    )
    return _new_view(values, entry_rows)


def post_pending(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    *,
    amount_minor: int | None,
    now_us: int,
) -> Transfer:
    pending = _unresolved_pending(connection, tenant_id, transfer_id)
    if pending.expires_at_us is not None and now_us >= pending.expires_at_us:
        raise TransferExpired("the pending transfer has expired and can no longer be posted")
    posted_entries = _post_entries(pending, amount_minor)
    resolution_id = ids.new_id("txn")
    _insert_resolution(connection, tenant_id, resolution_id, "post", pending, now_us)
    account_rows = _accounts(connection, tenant_id, [e.account_id for e in pending.entries])
    _write_entries(connection, tenant_id, resolution_id, posted_entries, account_rows, now_us, released=pending.entries)
    return get_transfer(connection, tenant_id, transfer_id)


def void_pending(
    connection: Connection, tenant_id: str, transfer_id: str, *, now_us: int, kind: str = "void"
) -> Transfer:
    assert kind in ("void", "expire"), kind
    pending = _unresolved_pending(connection, tenant_id, transfer_id)
    _insert_resolution(connection, tenant_id, ids.new_id("txn"), kind, pending, now_us)
    account_rows = _accounts(connection, tenant_id, [e.account_id for e in pending.entries])
    _write_entries(connection, tenant_id, pending.id, (), account_rows, now_us, released=pending.entries)
    return get_transfer(connection, tenant_id, transfer_id)


def reverse_transfer(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    *,
    now_us: int,
    metadata: dict[str, str] | None = None,
) -> Transfer:
    original = get_transfer(connection, tenant_id, transfer_id)
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
    )
    account_rows = _check_spec(connection, tenant_id, spec, "")
    reversal_id = ids.new_id("txn")
    values = _transfer_values(tenant_id, reversal_id, "transfer", spec, now_us, None, None)
    values["reverses_id"] = original.id
    if not repository.insert_reversal(connection, values):
        raise TransferNotReversible("the transfer has already been reversed")
    entry_rows = _write_entries(connection, tenant_id, reversal_id, spec.entries, account_rows, now_us)
    return _new_view(values, entry_rows)


def create_batch(
    connection: Connection,
    tenant_id: str,
    specs: Sequence[TransferSpec],
    *,
    now_us: int,
    idempotency_key: str | None,
) -> tuple[str, list[Transfer]]:
    """All transfers apply or none: they share the caller's transaction."""
    batch_id = ids.new_id("batch")
    created = [
        create_transfer(
            connection,
            tenant_id,
            spec,
            now_us=now_us,
            batch_id=batch_id,
            param_prefix=f"transfers[{index}].",
        )
        for index, spec in enumerate(specs)
    ]
    del idempotency_key  # the batch's key lives in the idempotency record, not on each transfer
    return batch_id, created


def expire_due(connection: Connection, *, now_us: int, limit: int) -> int:
    """Void (as `expired`) up to `limit` pending transfers whose expiry has passed.

    Safe to run from several workers at once: the resolution insert is unique per pending
    transfer, so a second worker's attempt finds it resolved and moves on."""
    expired = 0
    for row in repository.due_expired_pending(connection, now_us, limit):
        try:
            void_pending(connection, row.tenant_id, row.id, now_us=now_us, kind="expire")
            expired += 1
        except TransferNotPending:
            continue
    return expired


def get_transfer(connection: Connection, tenant_id: str, transfer_id: str) -> Transfer:
    row = repository.get_transfer(connection, tenant_id, transfer_id)
    if row is None:
        raise TransferNotFound("no such transfer", param="id")
    entry_rows = repository.get_entries_of(connection, tenant_id, [row.id])
    status, resolved_by, posted_minor = "posted", None, None
    if row.kind == "pending":
        resolution = repository.get_resolution(connection, tenant_id, row.id)
        status = "pending"
        if resolution is not None:
            status = _RESOLUTION_STATUS[resolution.kind]
            resolved_by = resolution.id
            posted_entries = repository.get_entries_of(connection, tenant_id, [resolution.id])
            posted_minor = sum(e.amount_minor for e in posted_entries if e.direction == "debit")
    elif row.kind in ("void", "expire"):
        status = _RESOLUTION_STATUS[row.kind]
    return Transfer(
        id=row.id,
        kind=row.kind,
        status=status,
        entries=tuple(_entry(e) for e in entry_rows),
        pending_id=row.pending_id,
        reverses_id=row.reverses_id,
        batch_id=row.batch_id,
        reference_type=row.reference_type,
        reference_id=row.reference_id,
        metadata=json.loads(row.metadata),
        expires_at_us=row.expires_at_us,
        created_at_us=row.created_at_us,
        resolved_by=resolved_by,
        posted_minor=posted_minor,
    )


def list_entries(
    connection: Connection,
    tenant_id: str,
    account_id: str,
    *,
    limit: int,
    starting_after: str | None,
) -> tuple[list[Entry], bool]:
    """A page of the account's statement in commit order; `starting_after` is the id of the
    last entry of the previous page."""
    get_account(connection, tenant_id, account_id)  # 404 for an unknown account, not an empty page
    after_sequence = 0
    if starting_after is not None:
        found = repository.entry_sequence(connection, tenant_id, account_id, starting_after)
        if found is None:
            raise InvalidRequest("starting_after is not an entry of this account", param="starting_after")
        after_sequence = found
    rows = repository.list_entries(connection, tenant_id, account_id, limit=limit + 1, after_sequence=after_sequence)
    return [_entry(row) for row in rows[:limit]], len(rows) > limit


# ---------------------------------------------------------------------------- internals


def _check_spec(
    connection: Connection,
    tenant_id: str,
    spec: TransferSpec,
    prefix: str,
    known_accounts: Mapping[str, Account] | None = None,
) -> dict[str, Account]:
    """Refuse a transfer that could never apply: unknown accounts, mixed currencies, or
    entries that do not balance per currency."""
    if len(spec.entries) < 2:
        raise InvalidEntries("a transfer needs at least two entries", param=f"{prefix}entries")
    wanted = {e.account_id for e in spec.entries}
    if known_accounts is not None and wanted <= known_accounts.keys():
        account_rows = {account_id: known_accounts[account_id] for account_id in wanted}
    else:
        account_rows = _accounts(connection, tenant_id, wanted)
    sums: dict[str, int] = defaultdict(int)
    debits: dict[str, int] = defaultdict(int)
    for index, entry in enumerate(spec.entries):
        assert entry.direction in DIRECTIONS and 0 < entry.amount_minor <= AMOUNT_MINOR_MAX
        row = account_rows.get(entry.account_id)
        if row is None:
            raise AccountNotFound(f"no account {entry.account_id!r}", param=f"{prefix}entries[{index}].account_id")
        if spec.currency is not None and row.currency != spec.currency:
            raise CurrencyMismatch(
                f"account {row.id} holds {row.currency}, not {spec.currency}",
                param=f"{prefix}currency",
            )
        sums[row.currency] += entry.amount_minor if entry.direction == "debit" else -entry.amount_minor
        if entry.direction == "debit":
            debits[row.currency] += entry.amount_minor
    for currency, total in debits.items():
        # The transfer's amount is rendered as one JSON integer: it must be exact for every client.
        if total > AMOUNT_MINOR_MAX:
            raise InvalidAmount(
                f"the debits in {currency} add up to {total}, more than 2^53 - 1", param=f"{prefix}entries"
            )
    for currency, difference in sums.items():
        if difference != 0:
            raise UnbalancedTransfer(
                f"debits and credits in {currency} differ by {abs(difference)}",
                param=f"{prefix}entries",
            )
    return account_rows


def _transfer_values(
    tenant_id: str,
    transfer_id: str,
    kind: str,
    spec: TransferSpec,
    now_us: int,
    idempotency_key: str | None,
    batch_id: str | None,
) -> dict[str, Any]:
    assert spec.reference_type in REFERENCE_TYPES, spec.reference_type
    return {
        "tenant_id": tenant_id,
        "id": transfer_id,
        "kind": kind,
        "pending_id": None,
        "reverses_id": None,
        "batch_id": batch_id,
        "idempotency_key": idempotency_key,
        "reference_type": spec.reference_type,
        "reference_id": spec.reference_id,
        "metadata": json.dumps(spec.metadata, sort_keys=True),
        "expires_at_us": spec.expires_at_us if spec.pending else None,
        "created_at_us": now_us,
    }


def _write_entries(
    connection: Connection,
    tenant_id: str,
    transfer_id: str,
    specs: Sequence[EntrySpec],
    account_rows: Mapping[str, Account],
    now_us: int,
    *,
    pending: bool = False,
    released: Sequence[Entry] = (),
    prefix: str = "",
) -> list[dict[str, Any]]:
    """Apply the entries' (and any released hold's) totals to their accounts, then insert the
    entries numbered with each account's next sequence numbers, which the balance UPDATE hands
    out under the account's row lock."""
    deltas = _merge(_release(released), _deltas(specs, pending=pending))
    added: dict[str, int] = defaultdict(int)
    for spec in specs:
        added[spec.account_id] += 1
    counts = _apply(connection, tenant_id, account_rows, deltas, added, prefix)
    next_sequence = {account_id: counts[account_id] - added[account_id] + 1 for account_id in added}
    rows = []
    for spec in specs:
        rows.append(
            {
                "tenant_id": tenant_id,
                "id": ids.new_id("ent"),
                "transfer_id": transfer_id,
                "account_id": spec.account_id,
                "direction": spec.direction,
                "amount_minor": spec.amount_minor,
                "currency": account_rows[spec.account_id].currency,
                "account_sequence": next_sequence[spec.account_id],
                "created_at_us": now_us,
            }
        )
        next_sequence[spec.account_id] += 1
    repository.insert_entries(connection, rows)
    return rows


def _deltas(specs: Sequence[EntrySpec], *, pending: bool) -> dict[str, Totals]:
    deltas: dict[str, Totals] = {}
    for spec in specs:
        debit = spec.amount_minor if spec.direction == "debit" else 0
        credit = spec.amount_minor - debit
        delta = Totals(0, 0, debit, credit) if pending else Totals(debit, credit, 0, 0)
        deltas = _merge(deltas, {spec.account_id: delta})
    return deltas


def _release(pending_entries: Sequence[Entry]) -> dict[str, Totals]:
    deltas: dict[str, Totals] = {}
    for entry in pending_entries:
        debit = entry.amount_minor if entry.direction == "debit" else 0
        deltas = _merge(deltas, {entry.account_id: Totals(0, 0, -debit, -(entry.amount_minor - debit))})
    return deltas


def _merge(left: dict[str, Totals], right: dict[str, Totals]) -> dict[str, Totals]:
    merged = dict(left)
    for account_id, delta in right.items():
        base = merged.get(account_id, Totals(0, 0, 0, 0))
        merged[account_id] = Totals(
            base.debits_posted_minor + delta.debits_posted_minor,
            base.credits_posted_minor + delta.credits_posted_minor,
            base.debits_pending_minor + delta.debits_pending_minor,
            base.credits_pending_minor + delta.credits_pending_minor,
        )
    return merged


def _apply(
    connection: Connection,
    tenant_id: str,
    account_rows: Mapping[str, Account],
    deltas: dict[str, Totals],
    added: Mapping[str, int],
    prefix: str,
) -> dict[str, int]:
    """Update cached totals and entry counts in sorted account order (no deadlocks) and
    enforce flags on the totals the database returns, under the row lock the UPDATE took.
    Returns each account's entry count after this transfer."""
    counts = {}
    for account_id in sorted(deltas.keys() | added.keys()):
        delta = deltas.get(account_id, Totals(0, 0, 0, 0))
        applied = repository.apply_totals(
            connection, tenant_id, account_id, delta, added.get(account_id, 0), BALANCE_MINOR_MAX
        )
        if applied is None:
            raise BalanceOverflow(f"account {account_id} would exceed its balance range", param=f"{prefix}entries")
        totals, counts[account_id] = applied
        assert all(type(value) is int and 0 <= value <= BALANCE_MINOR_MAX for value in vars(totals).values())
        row = account_rows[account_id]
        if row.no_overdraft and breaks_no_overdraft(totals, row.normal_balance):
            raise InsufficientFunds(f"account {account_id} has insufficient available funds", param=f"{prefix}entries")
    return counts


def _unresolved_pending(connection: Connection, tenant_id: str, transfer_id: str) -> Transfer:
    transfer = get_transfer(connection, tenant_id, transfer_id)
    if transfer.kind != "pending" or transfer.status != "pending":
        raise TransferNotPending(f"the transfer is {transfer.status}, not pending", status=transfer.status)
    return transfer


def _insert_resolution(
    connection: Connection,
    tenant_id: str,
    resolution_id: str,
    kind: str,
    pending: Transfer,
    now_us: int,
) -> None:
    values = {
        "tenant_id": tenant_id,
        "id": resolution_id,
        "kind": kind,
        "pending_id": pending.id,
        "reverses_id": None,
        "batch_id": None,
        "idempotency_key": None,
        "reference_type": pending.reference_type,
        "reference_id": pending.reference_id,
        "metadata": "{}",
        "expires_at_us": None,
        "created_at_us": now_us,
    }
    if not repository.insert_resolution(connection, values):
        raise TransferNotPending("the transfer was resolved by a concurrent request")


def _post_entries(pending: Transfer, amount_minor: int | None) -> tuple[EntrySpec, ...]:
    full = tuple(EntrySpec(e.account_id, e.direction, e.amount_minor) for e in pending.entries)
    total = sum(e.amount_minor for e in pending.entries if e.direction == "debit")
    if amount_minor is None or amount_minor == total:
        return full
    if not 0 < amount_minor <= AMOUNT_MINOR_MAX:
        raise InvalidAmount("amount_minor must be a positive integer", param="amount_minor")
    if amount_minor > total:
        raise PostAmountExceedsPending(f"cannot post {amount_minor} of a {total} hold", param="amount_minor")
    if len(pending.entries) != 2:
        raise PartialPostUnsupported("only a two-entry hold can be posted partially", param="amount_minor")
    return tuple(EntrySpec(e.account_id, e.direction, amount_minor) for e in pending.entries)


def _new_view(values: dict[str, Any], entry_rows: Sequence[dict[str, Any]]) -> Transfer:
    """The view of a transfer just written, built from what was written (no read-back)."""
    return Transfer(
        id=values["id"],
        kind=values["kind"],
        status="pending" if values["kind"] == "pending" else "posted",
        entries=tuple(Entry(**{name: row[name] for name in _ENTRY_FIELDS}) for row in entry_rows),
        pending_id=values["pending_id"],
        reverses_id=values["reverses_id"],
        batch_id=values["batch_id"],
        reference_type=values["reference_type"],
        reference_id=values["reference_id"],
        metadata=json.loads(values["metadata"]),
        expires_at_us=values["expires_at_us"],
        created_at_us=values["created_at_us"],
    )


_ENTRY_FIELDS = (
    "id",
    "transfer_id",
    "account_id",
    "direction",
    "amount_minor",
    "currency",
    "account_sequence",
    "created_at_us",
)


def _entry(row: Row[Any]) -> Entry:
    return Entry(
        id=row.id,
        transfer_id=row.transfer_id,
        account_id=row.account_id,
        direction=row.direction,
        amount_minor=row.amount_minor,
        currency=row.currency,
        account_sequence=row.account_sequence,
        created_at_us=row.created_at_us,
    )
