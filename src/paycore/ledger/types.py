"""The ledger's value types: what callers pass in (specs) and get back (views), and how rows
become views. No SQL and no rules here."""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import Row

from paycore.ledger.balances import Balance, Totals, balance_of
from paycore.ledger.errors import AccountNotFound

DIRECTIONS = ("debit", "credit")
REFERENCE_TYPES = ("payment", "refund", "payout", "credit", "adjustment")
RESOLUTION_STATUS = {"post": "posted", "void": "voided", "expire": "expired"}


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
    # The flow object that owns the transfer (docs/ledger.md, "Who may move a transfer"): set
    # by a flow's code, None for the tenant's own. Only an owned transfer may touch a system account.
    owner_id: str | None = None
    # Accounts whose available balance this transfer may not take below zero, whatever their
    # no_overdraft flag (a payout never spends money its source does not have).
    guard_available: tuple[str, ...] = ()
    # A movement no overdraft flag may refuse: a chargeback (SPEC §6.2) has already happened at
    # the processor, so the merchant's balance goes negative (what the merchant owes) rather
    # than the books missing it. The balance limit still applies.
    overdraft_allowed: bool = False


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
    system: bool  # paycore's own (chart.py)


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
    owner_id: str | None = None
    resolved_by: str | None = None
    posted_minor: int | None = None


@dataclass(frozen=True)
class AccountTemplate:
    code: str
    currency: str
    normal_balance: str
    no_overdraft: bool


def account_from_row(row: Row[Any] | None) -> Account:
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
        system=bool(row.system),
    )


def new_transfer_view(values: dict[str, Any], entry_rows: Sequence[dict[str, Any]]) -> Transfer:
    """The view of a transfer just written, built from what was written (no read-back)."""
    return Transfer(
        id=values["id"],
        kind=values["kind"],
        status="pending" if values["kind"] == "pending" else "posted",
        entries=tuple(Entry(*_entry_fields(row)) for row in entry_rows),
        pending_id=values["pending_id"],
        reverses_id=values["reverses_id"],
        batch_id=values["batch_id"],
        reference_type=values["reference_type"],
        reference_id=values["reference_id"],
        metadata=json.loads(values["metadata"]) if values["metadata"] != "{}" else {},
        expires_at_us=values["expires_at_us"],
        created_at_us=values["created_at_us"],
        owner_id=values["owner_id"],
    )


ENTRY_FIELDS = (
    "id",
    "transfer_id",
    "account_id",
    "direction",
    "amount_minor",
    "currency",
    "account_sequence",
    "created_at_us",
)
assert tuple(f.name for f in fields(Entry)) == ENTRY_FIELDS, "in Entry's order"
_entry_fields = operator.itemgetter(*ENTRY_FIELDS)  # a row's values, as Entry's positional arguments


def entry_from_row(row: Row[Any]) -> Entry:
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
