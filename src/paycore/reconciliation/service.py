"""Reconciling one day's settlement report (ADR 0014, docs/reconciliation.md).

`reconcile(database, lines)` reads the report as it comes (`report.read`), in chunks of
`CHUNK_LINES` lines, one transaction per chunk: each line is looked up in its kind's table (by
the request id paycore sent, in the tenant the line names), judged (`matching.judge`), its
breaks stored (a finding already stored for that tenant and day is not stored again), and what
it proves about an item still waiting applied through that item's own lifecycle, with cause
`settlement_report`, like any other evidence. A file that is not a report is refused before
anything is written (`NotAReport`). Running the same report again stores nothing new and moves
nothing.

Not built yet (issue 20): booking the processor's fees, `missing_at_processor`,
`duplicate_line`, applying a payout's return, the one-run-per-day lease, superseding the breaks
of a corrected report.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, get_args

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit import clock, ids
from paycore.kit.errors import InvalidRequest, InvalidStartingAfter
from paycore.lifecycle.evidence import Evidence
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.processor.port import ChargeResult, PayoutResult, RefundResult
from paycore.reconciliation import models, repository, states
from paycore.reconciliation.errors import BreakNotFound, RunNotFound, UnknownResolution
from paycore.reconciliation.matching import KIND_OF_LINE, BreakType, Finding, Known, judge
from paycore.reconciliation.models import ALL_TENANTS
from paycore.reconciliation.report import Line, Malformed, NotAReport, read
from paycore.reconciliation.types import Break, Run, break_from_row, run_from_row
from paycore.refunds import service as refunds

CHUNK_LINES: Final = 500  # lines per transaction
CAUSE: Final = "settlement_report"
FAILED_CODE: Final = "failed_per_settlement_report"  # the report says failed, not why
SOURCES: Final = ("file", "processor")
BREAK_TYPES: Final[tuple[str, ...]] = get_args(BreakType)
BREAK_STATUSES: Final = models.BREAK_STATUSES
_TENANT_ID_CHARACTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

Progress = Callable[[int], None]


@dataclass
class Summary:
    run_id: str
    day: str
    lines_read: int = 0
    matched: int = 0
    breaks: Counter[str] = field(default_factory=Counter)  # breaks stored by this run, by type
    resolved: int = 0  # items the report moved


@dataclass
class _Chunk:
    lines: int = 0
    matched: int = 0
    breaks: Counter[str] = field(default_factory=Counter)
    resolved: int = 0


def reconcile(
    database: Database,
    lines: Iterable[str],
    *,
    source: str = "file",
    day: str | None = None,
    progress: Progress | None = None,
    actor: str = "reconciliation",
) -> Summary:
    """Reconcile the report in `lines` (text lines); the day is `day` or the first line's."""
    assert source in SOURCES
    digest = hashlib.sha256()
    items = read(_hashed(lines, digest))
    # Up to the first good line (the header is read here: NotAReport now writes nothing).
    leading = list(itertools.islice(items, CHUNK_LINES))
    if day is None:
        first = next((item for item in leading if isinstance(item, Line)), None)
        if first is None:
            raise NotAReport(f"no line among the first {len(leading)} gives the day: give it (--day YYYY-MM-DD)")
        day = clock.utc_day(first.created_at_us).isoformat()
    run_id = ids.new_id("rcn")
    database.transaction(partial(repository.insert_run, run_id=run_id, day=day, source=source, now_us=clock.now_us()))
    summary = Summary(run_id, day)
    remaining: Iterator[Line | Malformed] = itertools.chain(leading, items)
    while chunk := list(itertools.islice(remaining, CHUNK_LINES)):
        done = database.transaction(partial(_reconcile_chunk, chunk=chunk, run_id=run_id, day=day, actor=actor))
        summary.lines_read += done.lines
        summary.matched += done.matched
        summary.breaks.update(+done.breaks)  # the types it stored some of
        summary.resolved += done.resolved
        if progress is not None:
            progress(done.lines)
    counts = {
        "lines_read": summary.lines_read,
        "matched": summary.matched,
        "breaks_found": sum(summary.breaks.values()),
        "resolved": summary.resolved,
    }
    values = {**counts, "report_sha256": digest.hexdigest(), "finished_at_us": clock.now_us()}
    database.transaction(partial(repository.finish_run, run_id=run_id, values=values))
    return summary


def _hashed(lines: Iterable[str], digest: Any) -> Iterator[str]:
    for text in lines:
        digest.update(text.encode("utf-8"))
        yield text


def _reconcile_chunk(
    connection: Connection, *, chunk: list[Line | Malformed], run_id: str, day: str, actor: str
) -> _Chunk:
    done = _Chunk(lines=len(chunk))
    now = clock.now_us()
    for item in chunk:
        if isinstance(item, Malformed):
            finding = Finding("malformed_line", item.reason)
            key = f"malformed_line:{item.number}:{hashlib.sha256(repr(item.fields).encode()).hexdigest()[:16]}"
            tenant_id = _tenant_of(item.fields)
            where = _Where(run_id, day, tenant_id, now)
            done.breaks[finding.type] += _store(connection, where, key, finding, item.number, item.fields, None)
            continue
        found, known = _find(connection, item)
        verdict = judge(item, known)
        for finding in verdict.findings:
            key = f"{finding.type}:{item.type}:{item.request_id}"
            where = _Where(run_id, day, item.merchant_id, now)
            done.breaks[finding.type] += _store(connection, where, key, finding, item.number, item.fields, known)
        if verdict.matched:
            done.matched += 1
        if verdict.proves is not None and found is not None:
            done.resolved += _apply(connection, item, found, verdict.proves, actor=actor, now_us=now)
    return done


def _find(connection: Connection, line: Line) -> tuple[Any, Known | None]:
    """The object the line names, locked for this transaction, and what the rules need of it."""
    kind = KIND_OF_LINE[line.type]
    tenant_id, object_id = line.merchant_id, line.request_id
    if kind == "payment":
        found: Any = payments.find(connection, tenant_id, object_id, for_update=True)
        status = None if found is None else found.status
    elif kind == "refund":
        found = refunds.find(connection, tenant_id, object_id, for_update=True)
        status = None if found is None else found.status
    else:
        found = payouts.find(connection, tenant_id, object_id, for_update=True)
        status = None if found is None else payouts.public_status(found.status)
    if found is None or status is None:
        return None, None
    return found, Known(kind, found.id, status, found.amount_minor, found.currency)


def _apply(connection: Connection, line: Line, found: Any, proves: str, *, actor: str, now_us: int) -> int:
    """Apply what the line proves through the object's lifecycle; 1 when it moved it."""
    failure = FAILED_CODE if proves == "failed" else None
    if line.type == "charge":
        charge = ChargeResult(line.request_id, proves, line.processor_id, line.amount_minor, line.currency, failure)  # type: ignore[arg-type]
        applied = payments.apply_evidence(
            connection, found, Evidence.of_result(charge), cause=CAUSE, actor=actor, now_us=now_us
        )
        return int(applied.changed)
    if line.type == "refund":
        refund = RefundResult(line.request_id, proves, line.processor_id, line.amount_minor, line.currency, failure)  # type: ignore[arg-type]
        moved = refunds.apply_evidence(
            connection, found, Evidence.of_result(refund), cause=CAUSE, actor=actor, now_us=now_us
        )
        return int(moved.changed)
    if line.type == "payout":
        result = PayoutResult(
            request_id=line.request_id,
            status="settled",
            bank_payout_id=line.processor_id,
            amount_minor=line.amount_minor,
            currency=line.currency,
            rail=found.rail,
            batch_id=line.batch_id,
            fee_minor=line.fee_minor,
        )
        _, outcome = payouts.apply_result(connection, found, result, cause=CAUSE, actor=actor, now_us=now_us)
        return int(outcome == "applied")
    return 0  # a payout's return: applied with its return code and adjustments, not built yet


@dataclass(frozen=True)
class _Where:
    """The run, day and tenant a break is stored under, and when."""

    run_id: str
    day: str
    tenant_id: str
    now_us: int


def _store(
    connection: Connection,
    where: _Where,
    key: str,
    finding: Finding,
    number: int,
    fields: tuple[str, ...],
    known: Known | None,
) -> int:
    """Store the finding unless the tenant's day has it already; 1 when stored."""
    values = {
        "tenant_id": where.tenant_id,
        "id": ids.new_id("brk"),
        "run_id": where.run_id,
        "day": where.day,
        "type": finding.type,
        "status": "open",
        "finding_key": key,
        "object_type": None if known is None else known.kind,
        "object_id": None if known is None else known.id,
        "object_status": None if known is None else known.status,
        "line_number": number,
        "line": json.dumps(list(fields), ensure_ascii=False),
        "detail": finding.detail,
        "resolution": None,
        "note": None,
        "resolved_by": None,
        "resolved_at_us": None,
        "created_at_us": where.now_us,
    }
    stored = repository.insert_break(connection, values)
    if stored:
        states.record_opened(connection, values, where.now_us)
    return int(stored)


def _tenant_of(fields: tuple[str, ...]) -> str:
    """The tenant a malformed line names, if its merchant field reads as one; else `*`."""
    merchant = fields[3] if len(fields) > 3 else ""
    if 0 < len(merchant) <= 64 and set(merchant) <= _TENANT_ID_CHARACTERS:
        return merchant
    return ALL_TENANTS


def run(connection: Connection, run_id: str) -> dict[str, Any] | None:
    row = repository.get_run(connection, run_id)
    return None if row is None else dict(row._mapping)


def breaks_of(connection: Connection, tenant_id: str, *, limit: int = 100) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in repository.breaks(connection, tenant_id, limit=limit)]


def breaks_by_type_and_status(connection: Connection) -> dict[tuple[str, str], int]:
    """Breaks over every tenant by (type, status): the metric's series."""
    return repository.breaks_by_type_and_status(connection)


def runs_summary(connection: Connection) -> tuple[int, int | None]:
    """(items the reports resolved, when the newest completed run finished)."""
    return repository.runs_summary(connection)


# --- the HTTP API: runs and breaks as a tenant sees them, resolving a break (issue 20) --------


def list_runs(connection: Connection, tenant_id: str, *, starting_after: str | None, limit: int) -> list[Run]:
    """Runs oldest first, each with the tenant's own break counts (one query for the page).
    `starting_after` is a run; anything else is refused."""
    if starting_after is not None and repository.get_run(connection, starting_after) is None:
        raise InvalidStartingAfter("starting_after is not a reconciliation run", param="starting_after")
    rows = [row._mapping for row in repository.run_page(connection, starting_after=starting_after, limit=limit)]
    counts = repository.break_counts_of_runs(connection, tenant_id, {row["id"]: row["day"] for row in rows})
    return [run_from_row(row, counts[row["id"]]) for row in rows]


def get_run(connection: Connection, tenant_id: str, run_id: str) -> Run:
    """The run with the tenant's own break counts, or RunNotFound."""
    row = repository.get_run(connection, run_id)
    if row is None:
        raise RunNotFound("no such reconciliation run", param="id")
    counts = repository.break_counts_of_runs(connection, tenant_id, {row.id: row.day})
    return run_from_row(row._mapping, counts[row.id])


def list_breaks(
    connection: Connection,
    tenant_id: str,
    *,
    status: str | None,
    break_type: str | None,
    starting_after: str | None,
    limit: int,
) -> list[Break]:
    """The tenant's breaks oldest first, in `status` and of `break_type` if given.
    `starting_after` is a break of the tenant, whatever its status or type."""
    if status is not None and status not in states.STATUSES:
        raise InvalidRequest(f"status must be one of {', '.join(states.STATUSES)}", param="status")
    if break_type is not None and break_type not in BREAK_TYPES:
        raise InvalidRequest(f"type must be one of {', '.join(BREAK_TYPES)}", param="type")
    if starting_after is not None and repository.get_break(connection, tenant_id, starting_after) is None:
        raise InvalidStartingAfter("starting_after is not a break of this tenant", param="starting_after")
    rows = repository.break_page(
        connection, tenant_id, status=status, break_type=break_type, starting_after=starting_after, limit=limit
    )
    return [break_from_row(row._mapping) for row in rows]


def get_break(connection: Connection, tenant_id: str, break_id: str) -> Break:
    """The tenant's break, or BreakNotFound (also for another tenant's)."""
    row = repository.get_break(connection, tenant_id, break_id)
    if row is None:
        raise BreakNotFound("no such break", param="id")
    return break_from_row(row._mapping)


def resolve_break(
    connection: Connection,
    tenant_id: str,
    break_id: str,
    *,
    resolution: str,
    note: str | None,
    actor: str,
    now_us: int,
) -> Break:
    """open -> resolved, with the resolution, the note, who and when; audited. A break that is
    not open is BreakNotOpen (409), whoever resolved or superseded it."""
    if resolution not in states.RESOLUTIONS:
        raise UnknownResolution(f"resolution must be one of {', '.join(states.RESOLUTIONS)}", param="resolution")
    if note is not None and not 0 < len(note) <= states.NOTE_CHARS_MAX:
        raise InvalidRequest(f"note must be 1 to {states.NOTE_CHARS_MAX} characters", param="note")
    current = get_break(connection, tenant_id, break_id)
    values = {"resolution": resolution, "note": note, "resolved_by": actor, "resolved_at_us": now_us}
    return states.move(
        connection, current, states.RESOLVED, cause=resolution, actor=actor, now_us=now_us, values=values
    )
