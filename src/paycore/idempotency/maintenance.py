"""Idempotency keys kept and rewritten after their requests: the prune job's lag and its bounded
deletes of keys past their retention, and the walk of stored answers that `paycore secrets
rotate` re-seals. `idempotency.service` re-exports them."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from paycore.idempotency import repository


def oldest_expired_us(connection: Connection, *, now_us: int) -> int | None:
    """When the oldest key past its retention expired (the prune job's lag)."""
    return repository.oldest_expired_us(connection, now_us)


def prune(connection: Connection, *, now_us: int, limit: int) -> int:
    """Delete up to `limit` keys past their retention (keys kept forever have no expiry)."""
    return repository.delete_expired(connection, now_us, limit)


# ------------------------------------------------------------------ stored answers, rewritten
# A stored answer may hold a secret sealed at rest (a webhook endpoint's, ADR 0018): `paycore
# secrets rotate` walks every key in bounded pages and re-seals those it finds.


@dataclass(frozen=True)
class StoredAnswer:
    tenant_id: str
    key: str
    body: str | None  # only when it contains what was asked for


def stored_answers(
    connection: Connection, *, after: tuple[str, str] | None, limit: int, containing: str
) -> list[StoredAnswer]:
    """The next `limit` keys after (tenant_id, key), in that order, each with its stored body if
    the body contains `containing` (read by the database: other bodies never leave it)."""
    rows = repository.answers_page(connection, after=after, limit=limit, containing=containing)
    return [StoredAnswer(row.tenant_id, row.key, row.response_body) for row in rows]


def replace_answer(connection: Connection, tenant_id: str, key: str, *, was: str, now: str) -> bool:
    """Rewrite a stored answer if it is still `was` (compare-and-set): its meaning must not change."""
    return repository.replace_body(connection, tenant_id, key, was, now)


def count_keys(connection: Connection) -> int:
    return repository.count_keys(connection)
