"""A report line naming a dispute paycore does not know (SPEC §6.2, ADR 0030).

The line alone never makes the dispute: it lacks the dispute's type, status and deadline, and
proves nothing a processor did not say. So before a chunk's transaction, with none open, the
run asks the processor for each dispute its dispute lines name that paycore does not hold
(`disputes.service.query_status`: the status query, recorded through `disputes.service.record`
like a webhook, the dispute made exactly once whatever else arrives and in whatever order).
Then the chunk is matched as ever, set-based (`staging`) or line by line (`matching.judge`),
and finds the dispute the processor's answer made. A dispute the processor does not know, one
on a payment paycore does not hold, or a query with no answer: the line stays
`missing_in_paycore`.

Bounded: at most `QUERIES_PER_CHUNK_MAX` queries per chunk, and none once a third of the run's
lease has gone on them (the chunk's transaction renews the lease after); the lines left unasked
are `missing_in_paycore` this run, and the next run of the day asks again.
"""

from __future__ import annotations

import time
from typing import Final

from paycore.db.engine import Database
from paycore.disputes import service as disputes
from paycore.processor.port import Processor
from paycore.reconciliation.matching import DISPUTE_LINE_TYPES
from paycore.reconciliation.report import Staged

QUERIES_PER_CHUNK_MAX: Final = 100
_TYPE, _PROCESSOR_ID, _MERCHANT = 1, 3, 4  # a staged line's fields (`report.Staged`)


def named(rows: list[Staged]) -> list[tuple[str, str]]:
    """The (tenant, processor's dispute id) the chunk's dispute lines name, in order, once each."""
    found = {(row[_MERCHANT], row[_PROCESSOR_ID]) for row in rows if row[_TYPE] in DISPUTE_LINE_TYPES}
    return sorted(found)


def learn(database: Database, processor: Processor, rows: list[Staged], *, actor: str, lease_ms: int) -> int:
    """Ask the processor about each dispute the lines name that paycore does not hold, and record
    what it says; returns how many disputes its answers made or moved (`applied`)."""
    wanted = named(rows)
    if not wanted:
        return 0
    with database.read() as connection:
        unknown = [key for key in wanted if disputes.find(connection, *key) is None]
    deadline = time.monotonic() + lease_ms / 3000
    applied = 0
    for _tenant, processor_dispute_id in unknown[:QUERIES_PER_CHUNK_MAX]:
        if time.monotonic() >= deadline:
            break
        applied += disputes.query_status(database, processor, processor_dispute_id, actor=actor) == "applied"
    return applied
