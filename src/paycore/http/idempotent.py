"""The HTTP side of idempotency: run a money-moving effect once per key, replay otherwise."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency import service as idempotency
from paycore.idempotency.errors import IdempotencyKeyRequired
from paycore.kit.clock import now_us

Effect = Callable[[Connection, int], tuple[int, Any]]
# What the client is shown of a stored answer (the same for the first answer and its replays):
# the answer is stored as the effect made it (e.g. with a secret sealed at rest, ADR 0018).
Shown = Callable[[str], str]
_US_PER_DAY = 86_400 * 1_000_000
# A path that `request.url.path` gives back unchanged: no "?", "#" or "\\" (which the URL
# escapes), no control character or space (which `urlsplit` strips), no leading "//".
_PLAIN_PATH: Final = re.compile(r"/(?!/)[^?#\\\x00-\x20\x7f]*")


def request_path(request: Request) -> str:
    """`request.url.path`, the path a key's fingerprint names, without building the whole URL
    (its host, port and query) for a path it would give back as it is."""
    path: str = request.scope["path"]
    return path if _PLAIN_PATH.fullmatch(path) else request.url.path


def header_key(request: Request, *, required: bool) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        if required:
            raise IdempotencyKeyRequired("this request moves money: send an Idempotency-Key header")
        return None
    return idempotency.check_key(key)


def run(
    request: Request,
    *,
    tenant_id: str,
    key: str | None,
    body: Any,
    effect: Effect,
    keep_forever: bool,
    replay_status: int | None = None,
    shown: Shown | None = None,
) -> Response:
    """Execute `effect(connection, now_us)` in one transaction with its idempotency record.

    `effect` returns (status, payload); domain errors it raises become recorded refusals or
    plain error responses, as `idempotency.execute` decides. `shown` turns a 2xx answer's body,
    as stored, into what the client sees."""
    database: Database = request.app.state.database
    if key is None:
        return _plain(database, effect, shown)
    key_scope = scope(request, tenant_id=tenant_id, key=key, body=body, keep_forever=keep_forever)
    outcome, replayed = idempotency.run(database, key_scope, _guarded(effect, key_scope), render_refusal)
    if shown is not None and 200 <= outcome.status < 300:
        outcome = idempotency.Outcome(outcome.status, shown(outcome.body))
    return response(outcome, replayed, replay_status)


@dataclass(frozen=True)
class Reference:
    """A money request's reference path (`run`, a key required), which a data-plane phase
    leaves to decide what it did not write (ADR 0026): run on the caller's thread (`run`), or
    awaited from the event loop (`on_loop`). For an effect that calls no other system."""

    request: Request
    tenant_id: str
    key: str
    body: Any
    effect: Effect
    keep_forever: bool

    def run(self) -> Response:
        return run(
            self.request,
            tenant_id=self.tenant_id,
            key=self.key,
            body=self.body,
            effect=self.effect,
            keep_forever=self.keep_forever,
        )

    async def on_loop(self) -> Response:
        """`run` from a thin edge's event loop (`idempotency.run_on_loop`: on SQLite no worker
        thread, on PostgreSQL one)."""
        database: Database = self.request.app.state.database
        key_scope = scope(
            self.request, tenant_id=self.tenant_id, key=self.key, body=self.body, keep_forever=self.keep_forever
        )
        guarded = _guarded(self.effect, key_scope)
        outcome, replayed = await idempotency.run_on_loop(database, key_scope, guarded, render_refusal)
        return response(outcome, replayed)


def _guarded(effect: Effect, key_scope: idempotency.KeyScope) -> Callable[[Connection], idempotency.Outcome]:
    def guarded(connection: Connection) -> idempotency.Outcome:
        status, payload = effect(connection, key_scope.now_us)
        return idempotency.Outcome(status, dumps(payload))

    return guarded


def scope(request: Request, *, tenant_id: str, key: str, body: Any, keep_forever: bool) -> idempotency.KeyScope:
    """The key's scope for this request: its tenant, the request's fingerprint, its clock."""
    fingerprint = idempotency.fingerprint(request.method, request_path(request), body)
    retention_us = request.app.state.settings.idempotency_retention_days * _US_PER_DAY
    started_us = now_us()
    return idempotency.KeyScope(
        tenant_id=tenant_id,
        key=key,
        request_fingerprint=fingerprint,
        now_us=started_us,
        expires_at_us=None if keep_forever else started_us + retention_us,
    )


def response(outcome: idempotency.Outcome, replayed: bool, replay_status: int | None = None) -> Response:
    status = outcome.status
    headers = None  # no header of its own: Starlette's list then holds the length and type alone
    if replayed:
        headers = {"Idempotent-Replayed": "true"}
        if replay_status is not None and 200 <= status < 300:
            status = replay_status
    return Response(outcome.body, status_code=status, media_type="application/json", headers=headers)


def _plain(database: Database, effect: Effect, shown: Shown | None) -> Response:
    status, payload = database.transaction(lambda connection: effect(connection, now_us()))
    body = dumps(payload)
    if shown is not None and 200 <= status < 300:
        body = shown(body)
    return Response(body, status_code=status, media_type="application/json")
