"""Idempotency keys (SPEC §3.1), as one piece every money-moving POST uses.

Design (docs/adr/0004-idempotency.md): the key row is claimed with
`INSERT ... ON CONFLICT DO NOTHING` *inside the same transaction as the effect it guards*,
and the response is written to it before that transaction commits. So:

- the effect and its key commit together or not at all: a crash or a rolled-back request
  leaves no key behind, and the same key can be retried;
- two requests with one key never both execute. On PostgreSQL the second one waits for the
  first's transaction to end (queued on the key's advisory lock, bounded once by lock_timeout,
  default 10 s: `repository.claim`) and then finds the committed key and replays it; on
  SQLite the write transaction is serialised at `BEGIN IMMEDIATE`. No in-process lock is
  involved, so this holds across processes;
- a business refusal (a recorded `DomainError`) rolls the whole transaction back, and the
  refusal is then recorded as the key's response in a second transaction (unless a
  concurrent duplicate recorded an outcome first, which is then replayed), so a retry
  replays the same refusal. The path that succeeds pays for no savepoint.

The stored response is opaque (a status integer and a body string) so this module knows
nothing of HTTP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.db.engine import Database, DatabaseBusy, is_lock_timeout
from paycore.idempotency import repository
from paycore.idempotency.errors import IdempotencyKeyReused, IdempotencyRequestInProgress
from paycore.idempotency.in_progress import IN_PROGRESS, HeldAtTheBound
from paycore.idempotency.keys import KeyScope, Outcome, check_key, fingerprint, key_problem
from paycore.idempotency.maintenance import (
    StoredAnswer,
    count_keys,
    oldest_expired_us,
    prune,
    replace_answer,
    stored_answers,
)
from paycore.kit.errors import DomainError
from paycore.kit.threads import run_blocking

# The key's values and its upkeep live in `keys` and `maintenance`; re-exported here, the one
# front door every money-moving POST imports.
__all__ = [
    "KeyScope",
    "Outcome",
    "RefusalToRecord",
    "StoredAnswer",
    "answered",
    "check_key",
    "claim_answered",
    "claim_open",
    "complete",
    "count_keys",
    "execute",
    "fingerprint",
    "in_progress_error",
    "key_problem",
    "left_to_reference",
    "oldest_expired_us",
    "prune",
    "record_refusal",
    "recorded",
    "replace_answer",
    "run",
    "run_async",
    "run_on_loop",
    "stored_answers",
    "waited_for_the_key",
    "waited_too_long",
    "write",
    "write_async",
]

T = TypeVar("T")


class RefusalToRecord(Exception):
    """Raised out of `execute` when the effect refused (a recorded DomainError): the caller
    rolls the transaction back and records `outcome` with `record_refusal` in a new one."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.body)
        self.outcome = outcome


def run(
    database: Database,
    scope: KeyScope,
    effect: Callable[[Connection], Outcome],
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """Run `effect` once per (tenant, key), in one transaction with its key. Returns
    (outcome, replayed). A recorded refusal is written in a second transaction, after the
    first rolled back: no savepoint is paid for on the path that succeeds."""
    attempt = _Attempt(scope, effect, render_refusal)
    try:
        return database.transaction(attempt.work)
    except (RefusalToRecord, DatabaseBusy) as error:
        follow_up = attempt.after(error)
    finally:
        attempt.release()
    return database.transaction(follow_up)


async def run_async(
    database: Database,
    scope: KeyScope,
    effect: Callable[[Connection], Outcome],
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """`run` for a caller on an event loop (`Database.transaction_async`)."""
    attempt = _Attempt(scope, effect, render_refusal)
    held_at_the_bound = HeldAtTheBound(database, scope, attempt.owner)
    try:
        return await database.transaction_async(attempt.work)
    except (RefusalToRecord, DatabaseBusy) as error:
        follow_up = attempt.after(error, held_at_the_bound)
    finally:
        held_at_the_bound.stop()
        attempt.release()
    return await database.transaction_async(follow_up)


async def run_on_loop(
    database: Database,
    scope: KeyScope,
    effect: Callable[[Connection], Outcome],
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """`run` for a thin edge on the event loop (ADR 0026 decision 4), where a data-plane phase
    wrote nothing and the reference path must decide, for an effect that calls no other system:
    on SQLite `run_async` (its transactions handed to the writer, no worker thread); on
    PostgreSQL `run` itself on one worker thread, its attempt and a recorded refusal's follow-up
    on the same thread (the rare path: a key that exists, a refusal, a limit)."""
    if database.is_postgres:
        return await run_blocking(run, database, scope, effect, render_refusal)
    return await run_async(database, scope, effect, render_refusal)


async def write_async(database: Database, scope: KeyScope, work: Callable[[Connection], T]) -> T:
    """A data-plane write (ADR 0026) that claims `scope`'s key itself, in one transaction
    (`Database.transaction_async`): a wait past its bound is answered as `run_async` answers
    it ("in progress" while this process holds the key open elsewhere, else busy)."""
    owner = object()
    held_at_the_bound = HeldAtTheBound(database, scope, owner)

    def claimed(connection: Connection) -> T:
        result = work(connection)
        IN_PROGRESS.claim(scope, owner)  # the key is this transaction's until it ends
        return result

    try:
        return await database.transaction_async(claimed)
    except DatabaseBusy as error:
        if held_at_the_bound():
            raise _in_progress() from error
        raise
    finally:
        held_at_the_bound.stop()
        IN_PROGRESS.release(scope, owner)


def write(database: Database, scope: KeyScope, work: Callable[[Connection], T]) -> T:
    """`write_async` for a caller on a worker thread (`Database.transaction`): a data-plane
    write that claims `scope`'s key itself (`claim_answered`), a wait past its bound answered
    as `run` answers it."""
    owner = object()

    def claimed(connection: Connection) -> T:
        result = work(connection)
        IN_PROGRESS.claim(scope, owner)  # the key is this transaction's until it ends
        return result

    try:
        return database.transaction(claimed)
    except DatabaseBusy as error:
        if IN_PROGRESS.running_elsewhere(scope, owner):
            raise _in_progress() from error
        raise
    finally:
        IN_PROGRESS.release(scope, owner)


def claim_answered(connection: Connection, scope: KeyScope, outcome: Outcome) -> bool:
    """Claim the key with its answer already known (a data-plane write, ADR 0026): False, and
    no change, if the key exists."""
    return _claim(connection, scope.row(outcome))


class _Attempt:
    """One request's try at its key: the transaction's work, and what follows it failing."""

    def __init__(
        self,
        scope: KeyScope,
        effect: Callable[[Connection], Outcome],
        render_refusal: Callable[[DomainError], Outcome],
    ) -> None:
        self.scope, self.effect, self.render_refusal = scope, effect, render_refusal
        self.owner = object()

    def work(self, connection: Connection) -> tuple[Outcome, bool]:
        return execute(
            connection,
            self.scope,
            self.effect,
            self.render_refusal,
            on_claimed=lambda: IN_PROGRESS.claim(self.scope, self.owner),
        )

    def after(
        self, error: RefusalToRecord | DatabaseBusy, held_elsewhere: Callable[[], bool] | None = None
    ) -> Callable[[Connection], tuple[Outcome, bool]]:
        """The second transaction's work after a refusal; raises on a lock wait past its bound
        (`held_elsewhere`: whether the key was another request's then; by default, now)."""
        if isinstance(error, DatabaseBusy):
            if (held_elsewhere or self._running_elsewhere)():
                raise _in_progress() from error
            raise error
        outcome = error.outcome
        return lambda connection: record_refusal(connection, self.scope, outcome)

    def release(self) -> None:
        IN_PROGRESS.release(self.scope, self.owner)

    def _running_elsewhere(self) -> bool:
        return IN_PROGRESS.running_elsewhere(self.scope, self.owner)


def execute(
    connection: Connection,
    scope: KeyScope,
    effect: Callable[[Connection], Outcome],
    render_refusal: Callable[[DomainError], Outcome],
    on_claimed: Callable[[], None] | None = None,
) -> tuple[Outcome, bool]:
    """Inside the caller's transaction: claim the key, run `effect`, record its outcome."""
    if not _claim(connection, scope.row(None)):
        return _replay(connection, scope), True
    if on_claimed is not None:
        on_claimed()
    try:
        outcome = effect(connection)
    except DomainError as error:
        if not error.recorded:
            raise  # validation-type errors roll the whole transaction back: the key stays free
        raise RefusalToRecord(render_refusal(error)) from error
    repository.record_response(connection, scope.tenant_id, scope.key, outcome.status, outcome.body)
    return outcome, False


def record_refusal(connection: Connection, scope: KeyScope, outcome: Outcome) -> tuple[Outcome, bool]:
    """Record a refusal as the key's response, unless a concurrent request with the same key
    got there first (then its outcome is replayed: still one execution per key)."""
    if _claim(connection, scope.row(outcome)):
        return outcome, False
    return _replay(connection, scope), True


def _claim(connection: Connection, values: dict[str, Any]) -> bool:
    try:
        return repository.claim(connection, values)
    except DBAPIError as error:
        if is_lock_timeout(error):
            raise _in_progress() from error
        raise


def _in_progress() -> IdempotencyRequestInProgress:
    return IdempotencyRequestInProgress(
        "a request with this idempotency key is still being processed; retry later", retry_after_s=1
    )


def _replay(connection: Connection, scope: KeyScope) -> Outcome:
    row = repository.get(connection, scope.tenant_id, scope.key)
    assert row is not None, "a key that conflicted on insert exists once its writer committed"
    if row.fingerprint != scope.request_fingerprint:
        raise IdempotencyKeyReused(
            "this idempotency key was already used with a different request",
            param="idempotency_key",
        )
    assert row.response_status is not None, "keys commit together with their response"
    return Outcome(status=row.response_status, body=row.response_body)


# ------------------------------------------------------------------ keys answered later
# For effects that span a call outside the database (a payment: commit, call the processor,
# commit again), the key is claimed *open* (no response) in the first transaction, so a
# duplicate can never start a second effect, and the response is recorded by whichever
# transaction first settles the effect's answer (the request itself, a webhook, the resolver).


def claim_open(connection: Connection, scope: KeyScope) -> bool:
    """Claim the key with no response yet; False if it exists (see `recorded`)."""
    return _claim(connection, scope.row(None))


def recorded(connection: Connection, scope: KeyScope) -> Outcome | None:
    """The response recorded for an existing key, or None while its effect has no answer yet.
    Raises IdempotencyKeyReused when the key was used for a different request."""
    row = repository.get(connection, scope.tenant_id, scope.key)
    assert row is not None, "asked about a key that was seen to exist"
    if row.fingerprint != scope.request_fingerprint:
        raise IdempotencyKeyReused(
            "this idempotency key was already used with a different request",
            param="idempotency_key",
        )
    if row.response_status is None:
        return None
    return Outcome(status=row.response_status, body=row.response_body)


def answered(connection: Connection, scope: KeyScope) -> Outcome | None:
    """The answer recorded for the key, or None when the key is unknown or still open; raises
    IdempotencyKeyReused when it was used for a different request. For an effect that claims
    its key only when it records its answer (a dispute's answer: `paycore.disputes.answers`)."""
    if repository.get(connection, scope.tenant_id, scope.key) is None:
        return None
    return recorded(connection, scope)


def complete(connection: Connection, tenant_id: str, key: str, outcome: Outcome) -> bool:
    """Record the response of an open key, once: False if one was recorded already."""
    return repository.complete(connection, tenant_id, key, outcome.status, outcome.body)


waited_for_the_key = repository.waited_for_the_key


def left_to_reference(error: DBAPIError, sqlstates: frozenset[str]) -> bool:
    """Whether a data-plane call that failed with `error`, having written nothing, leaves the
    request to the reference path: its SQLSTATE is one of `sqlstates` (the caller's refusals, a
    deadlock, ...); False: the caller raises `error`. A lock wait past its bound is raised at
    once as the key's wait (`waited_too_long`): waiting again on the reference path would
    double the bound."""
    if is_lock_timeout(error):
        raise waited_too_long(error) from error
    return getattr(error.orig, "sqlstate", None) in sqlstates


def waited_too_long(error: DBAPIError) -> Exception:
    """What to answer for a one-call write's lock wait past its bound (ADR 0011): what the
    reference path answers after the same wait, without waiting a second time. A duplicate
    behind its first request's uncommitted key is "still in progress"; any other lock (an
    account's) is "busy"."""
    context = getattr(getattr(error.orig, "diag", None), "context", None) or ""
    if waited_for_the_key(context):
        return _in_progress()
    return DatabaseBusy(str(error.orig))


def in_progress_error() -> IdempotencyRequestInProgress:
    return _in_progress()
