"""A hold posted or voided, and a transfer reversed, planned (ADR 0026): pure functions from the
transfer as read to the rows to write.

In: the key's scope (tenant, key, fingerprint, clock), the transfer the path names as read
(`Found`: its view, as `service.get_transfer` builds it, and the view of the transfer that
resolved it, if any), the facts of its accounts (this process's cache, ADR 0007), the request
(`amount_minor` to post part of a hold, a reversal's `metadata`), the new ids, and the renderer
of the answer. Out: for a post or a void a `Resolution` (the resolution's row, the posted
entries, each account's move in id order: the hold released and, posted, its entries added; the
answer, the hold as it reads after, whole: it holds no number the write hands out); for a
reversal `transfer_plan.Plan` (the reversal is a transfer whose row names what it reverses and
holds no key). No I/O here.

The transfer's facts are read outside the write and never change after (a transfer is never
updated: its owner, kind, expiry and entries are its own), but for one thing: whether it was
resolved or reversed since. The write decides that, by the unique `(tenant_id, pending_id)` and
`(tenant_id, reverses_id)` indexes, as the reference path's inserts do. Anything the plan does
not take returns None, and the reference path decides and answers, with the same code and
message as ever: a transfer that is not the tenant's own (a flow's: `managed_transfer`), not
pending, expired, a partial post it refuses, a transfer that is not reversible. The rules of a
post's entries are `postings.post_entries`'s, of a reversal's `postings.check_entries`'s (the
homes the reference path uses too)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paycore.idempotency.service import KeyScope, Outcome
from paycore.ledger.postings import post_entries, resolution_totals
from paycore.ledger.transfer_plan import AccountMove, NewIds, Plan, Render, plan_transfer
from paycore.ledger.types import RESOLUTION_STATUS, Account, EntrySpec, Transfer, TransferSpec

STATUS_RESOLVED = 200  # a post's or a void's answer (the hold); a reversal's is 201
_REVERSIBLE = ("transfer", "post")


@dataclass(frozen=True)
class Found:
    """The transfer the path names, as read: its view (status, resolution and posted amount
    derived as `service.get_transfer` derives them) and, for a resolved hold, its resolution's."""

    transfer: Transfer
    resolution: Transfer | None

    def __post_init__(self) -> None:
        assert (self.resolution is None) == (self.transfer.resolved_by is None), self
        assert self.resolution is None or self.resolution.pending_id == self.transfer.id, self


@dataclass(frozen=True)
class Resolution:
    """A hold posted or voided: `plan` holds the resolution's row, its posted entries (none for
    a void) and the accounts' moves; `outcome` the answer, the hold as it reads after."""

    hold_id: str
    kind: str  # post or void
    plan: Plan
    outcome: Outcome


def accounts_to_read(found: Found) -> list[str]:
    """The accounts whose facts the plans need: those of the transfer's entries and, for a
    resolved hold, its resolution's."""
    entries = found.transfer.entries + (() if found.resolution is None else found.resolution.entries)
    return sorted({entry.account_id for entry in entries})


def entries_to_make(found: Found, post: bool) -> int:
    """How many entries a post (or a void: none) of `found` writes: the hold's, one for one."""
    return len(found.transfer.entries) if post else 0


def plan_resolution(
    scope: KeyScope,
    found: Found,
    accounts: Mapping[str, Account],
    *,
    post: bool,
    amount_minor: int | None,
    new_ids: NewIds,
    render: Render,
) -> Resolution | None:
    """The rows of the hold's post (all of it, or `amount_minor`) or void, and the answer; None
    for anything the reference path must answer. Raises a post's refusal of its amount as the
    reference path does (`postings.post_entries`)."""
    hold = found.transfer
    if hold.owner_id is not None or hold.kind != "pending" or hold.status != "pending":
        return None  # a flow's (managed_transfer), not a hold, or resolved: the reference path's refusal
    if post and hold.expires_at_us is not None and scope.now_us >= hold.expires_at_us:
        return None  # transfer_expired
    kind = "post" if post else "void"
    posted = post_entries(hold, amount_minor) if post else ()
    assert len(new_ids.entry_ids) == len(posted), (new_ids, posted)
    values = _resolution_row(scope, hold, kind, new_ids.transfer_id)
    entry_rows = tuple(
        _entry_row(scope, new_ids.transfer_id, entry, accounts, entry_id)
        for entry, entry_id in zip(posted, new_ids.entry_ids, strict=True)
    )
    deltas, added = resolution_totals(hold.entries, posted)
    moves = tuple(
        AccountMove(
            account_id,
            deltas[account_id],
            added.get(account_id, 0),
            accounts[account_id].normal_balance,
            accounts[account_id].no_overdraft,  # a tenant's hold: no guard, no overdraft allowed
        )
        for account_id in sorted(deltas)
    )
    posted_minor = sum(entry.amount_minor for entry in posted if entry.direction == "debit")
    after = dataclasses.replace(
        hold, status=RESOLUTION_STATUS[kind], resolved_by=new_ids.transfer_id, posted_minor=posted_minor
    )
    body = render(after)
    plan = Plan(scope, values, entry_rows, moves, STATUS_RESOLVED, (body,))
    _check_resolution(hold, plan)
    return Resolution(hold.id, kind, plan, Outcome(STATUS_RESOLVED, body))


def plan_reversal(
    scope: KeyScope,
    found: Found,
    accounts: Mapping[str, Account],
    *,
    metadata: dict[str, str] | None,
    new_ids: NewIds,
    render: Render,
) -> Plan | None:
    """The rows of the reversal of the transfer `found` names (of its post, for a posted hold)
    and the answer cut where its entries' sequence numbers go; None for anything the reference
    path must answer. Raises a refusal of its entries as the reference path does
    (`postings.check_entries`: a system account, ...)."""
    original = reversed_transfer(found)
    if original is None:
        return None
    flipped = tuple(
        EntrySpec(entry.account_id, "credit" if entry.direction == "debit" else "debit", entry.amount_minor)
        for entry in original.entries
    )
    spec = TransferSpec(
        entries=flipped,
        metadata=metadata if metadata is not None else original.metadata,
        reference_type=original.reference_type,
        reference_id=original.reference_id,
        owner_id=original.owner_id,
    )
    assert spec.owner_id is None, original
    return plan_transfer(scope, spec, accounts, new_ids=new_ids, render=render, reverses_id=original.id)


def reversed_transfer(found: Found) -> Transfer | None:
    """What a reversal of `found` reverses, as `service.reverse_transfer` picks it: the
    transfer itself, or a posted hold's post; None where the reference path refuses (a flow's
    transfer, a hold not posted, a void or an expiry)."""
    original = found.transfer
    if original.owner_id is not None:
        return None  # managed_transfer
    if original.kind == "pending" and original.status == "posted":
        post = found.resolution
        assert post is not None and post.kind == "post", found
        return post
    return original if original.kind in _REVERSIBLE else None


def _resolution_row(scope: KeyScope, hold: Transfer, kind: str, resolution_id: str) -> dict[str, Any]:
    """The resolution's row, as `postings.insert_resolution` makes it."""
    return {
        "tenant_id": scope.tenant_id,
        "id": resolution_id,
        "kind": kind,
        "pending_id": hold.id,
        "reverses_id": None,
        "batch_id": None,
        "idempotency_key": None,
        "reference_type": hold.reference_type,
        "reference_id": hold.reference_id,
        "owner_id": hold.owner_id,
        "metadata": "{}",
        "expires_at_us": None,
        "created_at_us": scope.now_us,
    }


def _entry_row(
    scope: KeyScope, transfer_id: str, entry: EntrySpec, accounts: Mapping[str, Account], entry_id: str
) -> dict[str, Any]:
    return {
        "tenant_id": scope.tenant_id,
        "id": entry_id,
        "transfer_id": transfer_id,
        "account_id": entry.account_id,
        "direction": entry.direction,
        "amount_minor": entry.amount_minor,
        "currency": accounts[entry.account_id].currency,
        "account_sequence": 0,  # the write numbers it
        "created_at_us": scope.now_us,
    }


def _check_resolution(hold: Transfer, plan: Plan) -> None:
    """Pair assertions: the posted entries balance per currency; the moves release exactly the
    hold's pending totals and add exactly the posted entries, each account once, in id order."""
    sums: dict[object, int] = {}
    for row in plan.entry_rows:
        amount = int(row["amount_minor"])
        sums[row["currency"]] = sums.get(row["currency"], 0) + (amount if row["direction"] == "debit" else -amount)
    assert all(total == 0 for total in sums.values()), "a post's entries sum to zero in each currency"
    ids = [move.account_id for move in plan.moves]
    assert ids == sorted(set(ids)), "each account once, in id order"
    assert sum(move.entries_added for move in plan.moves) == len(plan.entry_rows)
    moved = [vars(move.delta) for move in plan.moves]
    held = sum(entry.amount_minor for entry in hold.entries)
    posted = sum(int(row["amount_minor"]) for row in plan.entry_rows)
    assert sum(d["debits_pending_minor"] + d["credits_pending_minor"] for d in moved) == -held
    assert sum(d["debits_posted_minor"] + d["credits_posted_minor"] for d in moved) == posted
    assert all(d["debits_posted_minor"] >= 0 and d["credits_posted_minor"] >= 0 for d in moved)
