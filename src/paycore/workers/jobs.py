"""Background jobs. Each does a bounded amount of work in one transaction and returns a count,
so any number of workers (threads or processes) can run them side by side."""

from __future__ import annotations

from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger


def expire_pending_transfers(database: Database, batch_max: int) -> int:
    return database.transaction(lambda connection: ledger.expire_due(connection, now_us=now_us(), limit=batch_max))


def prune_idempotency_keys(database: Database, batch_max: int) -> int:
    return database.transaction(lambda connection: idempotency.prune(connection, now_us=now_us(), limit=batch_max))


JOBS = (expire_pending_transfers, prune_idempotency_keys)
