"""One chunk of a report, in one transaction (ADR 0014): the merchants the lines name
checked to be tenants, the lines written into the staging table and matched set-based
(`staging`: recorded as seen, a second line for one object in a run being a `duplicate_line`;
the plainly matched ones counted and their fees recorded without a line of Python each), and the
other lines judged one by one (`matching.judge`): their objects loaded with one statement per
kind (`lookups`), their breaks stored, what they prove applied through the object's own lifecycle (cause
`settlement_report`). The chunk's processor fees are booked on the ledger, once per object.

A line's `merchant_id` is the tenant it belongs to. One that names no tenant of paycore (or one
that differs from a tenant's only by case: tenant ids are case-sensitive) is one
`unknown_account` break under the run's own scope, `*`: nothing else of it is
recorded, so that no row ever names a tenant that does not exist. A malformed line whose
merchant is not a tenant is stored under `*` too. A tenant exists once `paycore tenants create`
made it; in local mode (no API key and no operator yet) there is no list of tenants, every
request acts as the tenant it names, and so every well-formed merchant id is taken as one.

The statements per chunk do not grow with its lines: two or three for the tenants, one to write
the staging table, one each to record the lines seen, find the duplicates, find the lines not
plainly matched and record the plain fees, one ledger transfer per tenant and currency. Only a
line that is not plainly matched costs Python and statements of its own (its kind's lookup,
500 lines at a time; a break, an object to move), and such lines are few.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.kit import ids
from paycore.ledger import service as ledger
from paycore.lifecycle import faults
from paycore.lifecycle.evidence import MANUAL_CAUSE
from paycore.operators import service as operators
from paycore.reconciliation import lookups, moves, repository, staging, states
from paycore.reconciliation.lookups import FEE_LINE_TYPES
from paycore.reconciliation.matching import KIND_OF_LINE, Finding, Known, judge, reference
from paycore.reconciliation.models import ALL_TENANTS
from paycore.reconciliation.report import Line, Malformed, Staged, line_of
from paycore.tenants import service as tenants

JUDGED_LINES_MAX: Final = 500  # lines judged one by one per round of lookups (bounds each statement)
NOT_MOVED_DETAIL_CHARS_MAX: Final = 1_000
_TENANT_ID_CHARACTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True)
class Context:
    """The run, day and moment a chunk is reconciled under."""

    run_id: str
    day: str
    actor: str
    now_us: int
    chunk_number: int


@dataclass
class Counts:
    lines: int = 0
    matched: int = 0
    breaks: Counter[str] = field(default_factory=Counter)  # breaks stored, by type
    resolved: int = 0  # items the report moved
    fees_booked: int = 0  # objects whose fee was booked
    fees_minor: Counter[str] = field(default_factory=Counter)  # by currency

    def add(self, other: Counts) -> None:
        self.lines += other.lines
        self.matched += other.matched
        self.breaks.update(+other.breaks)
        self.resolved += other.resolved
        self.fees_booked += other.fees_booked
        self.fees_minor.update(+other.fees_minor)


@dataclass(frozen=True)
class Merchants:
    """Which merchants a chunk names are tenants: `known` (None in local mode: every one), and
    for the others, the tenant each differs from only by case, if any (by lower-cased id)."""

    known: frozenset[str] | None
    cased: dict[str, str]

    def is_tenant(self, merchant: str) -> bool:
        return self.known is None or merchant in self.known


@dataclass
class Chunk:
    """A chunk of the report as read, before its transaction (which may be retried: it holds
    what it read): its lines as staging rows in file order, its malformed lines, and the
    merchants they name."""

    rows: list[Staged] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)
    merchants: set[str] = field(default_factory=set)

    @property
    def lines(self) -> int:
        return len(self.rows) + len(self.malformed)

    def add(self, entry: Staged | Malformed) -> None:
        if isinstance(entry, Malformed):
            self.malformed.append(entry)
            merchant = _merchant_of(entry.fields)
            if merchant is not None:
                self.merchants.add(merchant)
            return
        self.rows.append(entry)
        self.merchants.add(entry[4])


def reconcile_chunk(
    connection: Connection, chunk: Chunk, context: Context, isolation: faults.Isolation | None = None
) -> Counts:
    """The chunk staged and matched set-based (`staging`); the lines that are not plainly
    matched judged one by one, JUDGED_LINES_MAX at a time; the chunk's fees booked. What a
    line proves is applied through `isolation` (`lifecycle.faults`): one that cannot be is an
    `item_not_moved` break."""
    isolation = isolation or faults.Isolation()
    counts = Counts(lines=chunk.lines)
    merchants = _merchants(connection, chunk.merchants)
    staging.create(connection)
    staging.write(connection, chunk.rows)
    strangers = [line_of(row) for row in staging.take_tenants(connection, _not_tenants(chunk.merchants, merchants))]
    strays: list[Line | Malformed] = [*chunk.malformed, *strangers]
    for entry in sorted(strays, key=lambda entry: entry.number):
        if isinstance(entry, Malformed):
            key = f"malformed_line:{entry.number}:{hashlib.sha256(repr(entry.fields).encode()).hexdigest()[:16]}"
            finding = Finding("malformed_line", entry.reason)
            tenant_id = _tenant_of(entry.fields, merchants)
            counts.breaks[finding.type] += store(connection, context, tenant_id, key, finding, entry)
        else:
            key = f"unknown_account:{entry.type}:{entry.merchant_id}:{entry.request_id}"
            finding = Finding("unknown_account", _unknown(entry.merchant_id, merchants))
            counts.breaks[finding.type] += store(connection, context, ALL_TENANTS, key, finding, entry)
    staging.record_seen(connection, context.run_id)
    duplicates = [line_of(row) for row in staging.duplicates(connection, context.run_id)]
    for line in duplicates:
        finding = Finding("duplicate_line", f"a second {line.type} line for {reference(line)} in this report")
        key = f"duplicate_line:{line.type}:{reference(line)}:{line.number}"
        counts.breaks[finding.type] += store(connection, context, line.merchant_id, key, finding, line)
    unsettled = [line_of(row) for row in staging.unsettled(connection, context.run_id)]
    plain_fees = staging.record_plain_fees(connection, context.run_id, context.now_us)
    counts.matched += len(chunk.rows) - len(strangers) - len(duplicates) - len(unsettled)
    to_book: list[tuple[Line, Known]] = []
    for start in range(0, len(unsettled), JUDGED_LINES_MAX):
        to_book += _judge_all(connection, unsettled[start : start + JUDGED_LINES_MAX], context, counts, isolation)
    _book_fees(connection, to_book, context, counts, plain_fees)
    staging.clear(connection)
    return counts


def _not_tenants(named: set[str], merchants: Merchants) -> list[str]:
    return [] if merchants.known is None else sorted(named - merchants.known)


def _judge_all(
    connection: Connection, first: list[Line], context: Context, counts: Counts, isolation: faults.Isolation
) -> list[tuple[Line, Known]]:
    """Judge each line (`matching.judge`), store its breaks, apply what it proves; returns the
    lines whose fee is to be booked. Statements: one per kind of object and one for the fees,
    then only for a line that finds something. A line whose proof cannot be applied is an
    `item_not_moved` break: not matched, its object as it was, its fee not booked."""
    found = lookups.find_all(connection, first)
    fees = lookups.fees_booked(connection, first)
    to_book: list[tuple[Line, Known]] = []
    for line in first:
        item: Any = found.get(lookups.key_of(line))
        known: Known | None = None if item is None else lookups.known_of(item, line, fees)
        verdict = judge(line, known)
        if verdict.proves is not None and item is not None:  # judge again on the row, locked
            item = lookups.find_one(connection, line)
            known = None if item is None else lookups.known_of(item, line, fees)
            verdict = judge(line, known)
        for found_now in verdict.findings:
            finding = _manual_or(connection, line, known, found_now)
            key = f"{finding.type}:{line.type}:{reference(line)}"
            counts.breaks[finding.type] += store(connection, context, line.merchant_id, key, finding, line, known)
        if verdict.proves is not None and item is not None:
            apply = partial(moves.apply, connection, line, item, verdict.proves, context.actor, context.now_us)
            applied = isolation.run(
                connection, apply, about={"line_number": str(line.number), "run_id": context.run_id}
            )
            if isinstance(applied, faults.Fault):
                counts.breaks["item_not_moved"] += _not_moved(connection, context, line, known, verdict.proves, applied)
                continue
            item, moved = applied
            found[lookups.key_of(line)] = item  # a later line sees it
            counts.resolved += int(moved)
        if verdict.matched:
            counts.matched += 1
        if verdict.matched and verdict.fee_to_book_minor > 0 and line.type in FEE_LINE_TYPES and known is not None:
            to_book.append((line, known))
    return to_book


def _not_moved(
    connection: Connection, context: Context, line: Line, known: Known | None, proves: str, fault: faults.Fault
) -> int:
    """The `item_not_moved` break of a line whose proof raised when applied (its writes undone)."""
    kind = KIND_OF_LINE[line.type]
    detail = (
        f"the report proves {kind} {line.request_id} {proves}; paycore could not move it there: {fault.message}"
        f" ({fault.code}); nothing moved"
    )
    finding = Finding("item_not_moved", detail[:NOT_MOVED_DETAIL_CHARS_MAX])
    key = f"item_not_moved:{line.type}:{line.request_id}"
    return store(connection, context, line.merchant_id, key, finding, line, known)


def _merchants(connection: Connection, named: set[str]) -> Merchants:
    """The chunk's merchants checked against the tenants: two statements in local mode (asking
    whether it is), three otherwise (four when some are not tenants: the case check)."""
    if operators.local_mode(connection):
        return Merchants(None, {})
    known = frozenset(tenants.tenant_ids(connection, sorted(named)))
    unknown = sorted(named - known)
    return Merchants(known, tenants.tenants_ignoring_case(connection, unknown) if unknown else {})


def _unknown(merchant: str, merchants: Merchants) -> str:
    meant = merchants.cased.get(merchant.lower())
    if meant is None:
        return f"merchant {merchant!r} is not a tenant of paycore"
    return f"merchant {merchant!r} is not a tenant of paycore (tenant ids are case-sensitive: {meant!r} is one)"


def _manual_or(connection: Connection, line: Line, known: Known | None, finding: Finding) -> Finding:
    """A status mismatch on an item a person resolved by hand is that resolution contradicted
    (ADR 0016): an escaped money defect of its own type. One statement, for such lines only."""
    if finding.type != "status_mismatch" or known is None:
        return finding
    if not audit.resolved_by_cause(connection, [(line.merchant_id, known.id)], MANUAL_CAUSE):
        return finding
    detail = f"a person resolved it by hand as {known.status}; the report says {line.type} {line.status}"
    return Finding("manual_resolution_contradicted", detail)


def _book_fees(
    connection: Connection,
    to_book: list[tuple[Line, Known]],
    context: Context,
    counts: Counts,
    plain: list[tuple[str, str, int, int]],
) -> None:
    """Record each object's fee once (its key in `reconciliation_fees`), then book the fees
    recorded now (these and the `plain` ones staging recorded: tenant, currency, total,
    objects) on the ledger, one transfer per tenant and currency."""
    rows = [
        {
            "tenant_id": line.merchant_id,
            "object_type": known.kind,
            "object_id": known.id,
            "currency": line.currency,
            "fee_minor": line.fee_minor,
            "run_id": context.run_id,
            "created_at_us": context.now_us,
        }
        for line, known in to_book
    ]
    totals: Counter[tuple[str, str]] = Counter()
    for tenant_id, currency, fee_minor, objects in plain:
        totals[(tenant_id, currency)] += fee_minor
        counts.fees_booked += objects
    for row in repository.insert_fees(connection, rows):
        tenant_id, currency, fee_minor = row.tenant_id, row.currency, row.fee_minor
        totals[(tenant_id, currency)] += int(fee_minor)
        counts.fees_booked += 1
    for (tenant_id, currency), fee_minor in sorted(totals.items()):
        key = f"settlement-fees:{context.run_id}:{context.chunk_number}:{currency}"
        ledger.book_processor_fee(
            connection,
            tenant_id,
            key=key,
            currency=currency,
            fee_minor=fee_minor,
            now_us=context.now_us,
            owner_id=context.run_id,
        )
        counts.fees_minor[currency] += fee_minor


def store(
    connection: Connection,
    context: Context,
    tenant_id: str,
    key: str,
    finding: Finding,
    where: Line | Malformed | None,
    known: Known | None = None,
    evidence: list[Any] | dict[str, Any] | None = None,
) -> int:
    """Store the finding unless the tenant's day has it already (then the run met it again);
    1 when stored. `evidence`: what a break that no report line brought is stored with (the
    webhook that contradicts a manual resolution)."""
    values = {
        "tenant_id": tenant_id,
        "id": ids.new_id("brk"),
        "run_id": context.run_id,
        "day": context.day,
        "type": finding.type,
        "status": "open",
        "finding_key": key,
        "object_type": None if known is None else known.kind,
        "object_id": None if known is None else known.id,
        "object_status": None if known is None else known.status,
        "line_number": None if where is None else where.number,
        "line": json.dumps((evidence or []) if where is None else list(where.fields), ensure_ascii=False),
        "detail": finding.detail,
        "resolution": None,
        "note": None,
        "resolved_by": None,
        "resolved_at_us": None,
        "created_at_us": context.now_us,
        "seen_run_id": context.run_id,
    }
    if repository.insert_break(connection, values):
        states.record_opened(connection, values, context.now_us, actor=context.actor)
        return 1
    repository.mark_break_seen(connection, tenant_id, context.day, key, context.run_id)
    return 0


def _merchant_of(fields: tuple[str, ...]) -> str | None:
    """The merchant field of a malformed line, if it reads as a tenant id."""
    merchant = fields[3] if len(fields) > 3 else ""
    if 0 < len(merchant) <= 64 and set(merchant) <= _TENANT_ID_CHARACTERS:
        return merchant
    return None


def _tenant_of(fields: tuple[str, ...], merchants: Merchants) -> str:
    """The tenant a malformed line names, if its merchant field is one; else `*`."""
    merchant = _merchant_of(fields)
    return merchant if merchant is not None and merchants.is_tenant(merchant) else ALL_TENANTS
