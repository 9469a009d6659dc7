"""The ledger's API shapes: strict request models, their conversion to service specs, and
the JSON renderings of accounts, balances, transfers and entries."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from paycore.kit.clock import parse_rfc3339, to_rfc3339
from paycore.kit.errors import InvalidAmount, InvalidRequest, UnsupportedCurrency
from paycore.kit.money import is_known_currency
from paycore.ledger.errors import InvalidEntries
from paycore.ledger.service import Account, Entry, EntrySpec, Transfer, TransferSpec
from paycore.schemas import AmountMinor, Currency, Id, Metadata, StrictModel


class AccountCreate(StrictModel):
    code: str = Field(min_length=1, max_length=128)
    currency: Currency
    normal_balance: Literal["credit", "debit"]
    no_overdraft: bool = False
    metadata: Metadata = Field(default_factory=dict)


class EntryIn(StrictModel):
    account_id: Id
    direction: Literal["debit", "credit"]
    amount_minor: AmountMinor


class TransferCreate(StrictModel):
    """Either the simple shape (debit_account_id, credit_account_id, amount_minor, currency)
    or the multi-entry shape (entries)."""

    debit_account_id: Id | None = None
    credit_account_id: Id | None = None
    amount_minor: AmountMinor | None = None
    currency: Currency | None = None
    entries: list[EntryIn] | None = None
    pending: bool = False
    expires_at: str | None = None
    metadata: Metadata = Field(default_factory=dict)
    reference_type: Literal["payment", "refund", "payout", "credit", "adjustment"] = "adjustment"
    reference_id: Id | None = None


class TransferBatch(StrictModel):
    transfers: list[TransferCreate] = Field(min_length=1)


class PostRequest(StrictModel):
    amount_minor: AmountMinor | None = None


class ReverseRequest(StrictModel):
    metadata: Metadata | None = None


def check_metadata(metadata: dict[str, str], *, keys_max: int, bytes_max: int, param: str = "metadata") -> None:
    if len(metadata) > keys_max:
        raise InvalidRequest(f"metadata holds at most {keys_max} keys", param=param)
    if len(json.dumps(metadata).encode()) > bytes_max:
        raise InvalidRequest(f"metadata is at most {bytes_max} bytes of JSON", param=param)


def to_spec(body: TransferCreate, *, entries_max: int, now_us: int, prefix: str = "") -> TransferSpec:
    simple = (body.debit_account_id, body.credit_account_id, body.amount_minor, body.currency)
    if body.entries is not None:
        if any(value is not None for value in simple):
            raise InvalidRequest("send either entries or the simple shape, not both", param=f"{prefix}entries")
        if not 2 <= len(body.entries) <= entries_max:
            raise InvalidEntries(f"a transfer has 2 to {entries_max} entries", param=f"{prefix}entries")
        entries = tuple(EntrySpec(e.account_id, e.direction, e.amount_minor) for e in body.entries)
        currency = None
    else:
        entries, currency = _simple_entries(body, prefix)
    return TransferSpec(
        entries=entries,
        pending=body.pending,
        currency=currency,
        expires_at_us=_expiry(body, now_us, prefix),
        metadata=body.metadata,
        reference_type=body.reference_type,
        reference_id=body.reference_id,
    )


def _simple_entries(body: TransferCreate, prefix: str) -> tuple[tuple[EntrySpec, ...], str]:
    if body.amount_minor is None:
        raise InvalidAmount("amount_minor is required", param=f"{prefix}amount_minor")
    for name in ("debit_account_id", "credit_account_id", "currency"):
        if getattr(body, name) is None:
            raise InvalidRequest(f"{name} is required (or send entries)", param=f"{prefix}{name}")
    assert body.debit_account_id is not None and body.credit_account_id is not None
    assert body.currency is not None
    if not is_known_currency(body.currency):
        raise UnsupportedCurrency(f"currency {body.currency!r} is not supported", param=f"{prefix}currency")
    if body.debit_account_id == body.credit_account_id:
        raise InvalidEntries("debit and credit accounts must differ", param=f"{prefix}credit_account_id")
    entries = (
        EntrySpec(body.debit_account_id, "debit", body.amount_minor),
        EntrySpec(body.credit_account_id, "credit", body.amount_minor),
    )
    return entries, body.currency


def _expiry(body: TransferCreate, now_us: int, prefix: str) -> int | None:
    if body.expires_at is None:
        return None
    if not body.pending:
        raise InvalidRequest("expires_at applies to pending transfers only", param=f"{prefix}expires_at")
    try:
        expires_at_us = parse_rfc3339(body.expires_at)
    except ValueError as error:
        raise InvalidRequest(
            f"expires_at is not an RFC 3339 timestamp: {error}", param=f"{prefix}expires_at"
        ) from error
    if expires_at_us <= now_us:
        raise InvalidRequest("expires_at must be in the future", param=f"{prefix}expires_at")
    return expires_at_us


def account_json(account: Account) -> dict[str, Any]:
    return {
        "id": account.id,
        "object": "account",
        "code": account.code,
        "currency": account.currency,
        "normal_balance": account.normal_balance,
        "no_overdraft": account.no_overdraft,
        "metadata": account.metadata,
        "created_at": to_rfc3339(account.created_at_us),
    }


def balance_json(account: Account) -> dict[str, Any]:
    return {
        "account_id": account.id,
        "currency": account.currency,
        "posted_minor": account.balance.posted_minor,
        "pending_minor": account.balance.pending_minor,
        "available_minor": account.balance.available_minor,
    }


def entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "transfer_id": entry.transfer_id,
        "account_id": entry.account_id,
        "direction": entry.direction,
        "amount_minor": entry.amount_minor,
        "currency": entry.currency,
        "account_sequence": entry.account_sequence,
        "created_at": to_rfc3339(entry.created_at_us),
    }


def transfer_json(transfer: Transfer) -> dict[str, Any]:
    currencies = {e.currency for e in transfer.entries}
    debits = [e for e in transfer.entries if e.direction == "debit"]
    credits = [e for e in transfer.entries if e.direction == "credit"]
    body: dict[str, Any] = {
        "id": transfer.id,
        "object": "transfer",
        "kind": transfer.kind,
        "status": transfer.status,
        "pending": transfer.kind == "pending",
        "amount_minor": sum(e.amount_minor for e in debits) if len(currencies) == 1 else None,
        "currency": next(iter(currencies)) if len(currencies) == 1 else None,
        "entries": [entry_json(e) for e in transfer.entries],
        "pending_id": transfer.pending_id,
        "reverses_id": transfer.reverses_id,
        "batch_id": transfer.batch_id,
        "resolved_by": transfer.resolved_by,
        "posted_minor": transfer.posted_minor,
        "reference": {"type": transfer.reference_type, "id": transfer.reference_id},
        "owner_id": transfer.owner_id,
        "metadata": transfer.metadata,
        "expires_at": None if transfer.expires_at_us is None else to_rfc3339(transfer.expires_at_us),
        "created_at": to_rfc3339(transfer.created_at_us),
    }
    if len(debits) == 1 and len(credits) == 1:
        body["debit_account_id"] = debits[0].account_id
        body["credit_account_id"] = credits[0].account_id
    return body
