"""Who is calling: the tenant a request acts as (SPEC §3.2), as FastAPI dependencies."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from fastapi import Request

from paycore.db.engine import Database
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.kit.threads import run_blocking
from paycore.operators import service as operators
from paycore.tenants import service as tenants
from paycore.tenants.errors import Forbidden, Unauthorized
from paycore.tenants.service import KeyOwner

# A key revoked by another process (the CLI, another API process) stops working here within
# this many seconds; one revoked through this process's `AuthState` stops at once.
_KEY_CACHE_TTL_S = float(tenants.KEY_CACHE_PERIOD_S)
_KEY_CACHE_SIZE_MAX = 10_000


@dataclass
class AuthState:
    """Once any API key or operator exists the server stays in authenticated mode for good
    (neither is ever deleted), so local mode is only ever re-checked while it is still in force.

    The keys' owners are cached, at most `_KEY_CACHE_SIZE_MAX` of them (emptied when full), each
    for `_KEY_CACHE_TTL_S`. `revoke_key` and `rotate_key` drop the key from the cache once the
    revocation has committed, and a read that began before the drop does not put it back
    (`_forgotten`, counted under the lock)."""

    database: Database
    auth_required: bool = False
    _keys: dict[str, tuple[KeyOwner | None, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _forgotten: int = 0

    def is_auth_required(self) -> bool:
        if not self.auth_required:
            self.auth_required = not operators.local_mode_now(self.database)
        return self.auth_required

    async def is_auth_required_on_loop(self) -> bool:
        """`is_auth_required` from the event loop, on PostgreSQL: no worker thread."""
        if not self.auth_required:
            self.auth_required = not await operators.local_mode_on_loop(self.database)
        return self.auth_required

    def owner_of_key(self, api_key: str) -> KeyOwner | None:
        now = time.monotonic()
        cached = self._keys.get(api_key)
        if cached is not None and cached[1] > now:
            return cached[0]
        forgotten = self._forgotten
        with self.database.read() as connection:
            owner = tenants.owner_of_key(connection, api_key)
        return self._kept(api_key, owner, now, forgotten)

    async def owner_of_key_on_loop(self, api_key: str) -> KeyOwner | None:
        """`owner_of_key` from the event loop, on PostgreSQL: the same cache, the read on the
        loop's connections (`db/loop_calls.py`), no worker thread."""
        now = time.monotonic()
        cached = self._keys.get(api_key)
        if cached is not None and cached[1] > now:
            return cached[0]
        forgotten = self._forgotten
        owner = await tenants.owner_of_key_on_loop(self.database, api_key)
        return self._kept(api_key, owner, now, forgotten)

    def _kept(self, api_key: str, owner: KeyOwner | None, now: float, forgotten: int) -> KeyOwner | None:
        """`owner`, read at `now`, cached unless a key was revoked since the read began."""
        with self._lock:
            if self._forgotten != forgotten:  # a key was revoked meanwhile: this read may predate it
                return owner
            if len(self._keys) >= _KEY_CACHE_SIZE_MAX:
                self._keys.clear()
            self._keys[api_key] = (owner, now + _KEY_CACHE_TTL_S)
        return owner

    def revoke_key(self, tenant_id: str, key_id: str) -> bool:
        """`tenants.revoke_key` in a transaction of its own; the key is refused by this process at
        once (by others within `_KEY_CACHE_TTL_S`)."""
        revoked = self.database.transaction(
            lambda connection: tenants.revoke_key(connection, tenant_id, key_id, actor=actors.LOCAL, now_us=now_us())
        )
        self._forget(key_id)
        return revoked

    def rotate_key(self, tenant_id: str, key_id: str) -> str | None:
        """`tenants.rotate_key` in a transaction of its own: the new key, the old one refused by
        this process at once (by others within `_KEY_CACHE_TTL_S`)."""
        new_key = self.database.transaction(
            lambda connection: tenants.rotate_key(connection, tenant_id, key_id, actor=actors.LOCAL, now_us=now_us())
        )
        self._forget(key_id)
        return new_key

    def _forget(self, key_id: str) -> None:
        with self._lock:
            self._forgotten += 1
            # Bounded by _KEY_CACHE_SIZE_MAX; a revocation is rare.
            stale = [key for key, (owner, _) in self._keys.items() if owner is not None and owner.key_id == key_id]
            for key in stale:
                del self._keys[key]


@dataclass(frozen=True)
class Caller:
    tenant_id: str
    authenticated: bool
    actor: str  # api_key:KEY_ID, or local (paycore.kit.actors)


def authenticate(request: Request) -> Caller:
    """A router dependency: FastAPI runs it before it validates the body, so a request
    without a valid key is a 401 whatever it carries. The result is kept on the request."""
    found: Caller = caller(request)
    request.state.caller = found
    return found


async def authenticate_on_loop(request: Request) -> Caller:
    """`authenticate` from the event loop with no worker thread (the payments' thin edge): on
    PostgreSQL its reads (is there any API key yet, while there is none; a key's owner, once per
    cache period) awaited on the loop's connections (`db/loop_calls.py`); on SQLite
    `authenticate` itself, whose reads are WAL reads of microseconds."""
    auth: AuthState = request.app.state.auth
    if not auth.database.is_postgres:
        return authenticate(request)
    found: Caller | None = request.scope.get("state", {}).get("caller")
    if found is None:
        if await auth.is_auth_required_on_loop():
            found = _key_caller(await auth.owner_of_key_on_loop(_bearer_key(request)))
        else:
            found = _local_caller(request)
    request.state.caller = found
    return found


async def authenticate_async(request: Request) -> Caller:
    """`authenticate` for the routers of `async` endpoints (ADR 0012). On SQLite its one
    read (is there any API key yet; a key's tenant once per cache period) is a WAL read of
    microseconds that never waits for the writer, so it runs on the event loop; on
    PostgreSQL it may be a round trip, made on a worker thread as for a sync endpoint."""
    auth: AuthState = request.app.state.auth
    if auth.database.is_postgres:
        return await run_blocking(authenticate, request)
    return authenticate(request)


def caller(request: Request) -> Caller:
    # The state's dict itself: `getattr(request.state, ...)` raises (and catches) an
    # AttributeError on every first call, a cost the money path paid on every request.
    known: Caller | None = request.scope.get("state", {}).get("caller")
    if known is not None:
        return known
    auth: AuthState = request.app.state.auth
    if auth.is_auth_required():
        return _key_caller(auth.owner_of_key(_bearer_key(request)))
    return _local_caller(request)


def _bearer_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, api_key = header.partition(" ")
    if scheme.lower() != "bearer" or not api_key:
        raise Unauthorized("send 'Authorization: Bearer <api key>'")
    return api_key.strip()


def _key_caller(owner: KeyOwner | None) -> Caller:
    if owner is None:
        raise Unauthorized("the API key is not valid")
    return Caller(tenant_id=owner.tenant_id, authenticated=True, actor=actors.api_key(owner.key_id))


def _local_caller(request: Request) -> Caller:
    named = request.headers.get("paycore-tenant", tenants.DEFAULT_TENANT)
    tenant_id = tenants.check_tenant_id(named, param="Paycore-Tenant")
    return Caller(tenant_id=tenant_id, authenticated=False, actor=actors.LOCAL)


def path_tenant(request: Request, tenant_id: str) -> str:
    """A tenant named in the path: an authenticated key reaches only its own (else 403).
    Who is calling is settled first, so an unauthenticated request is a 401 whatever its path."""
    who = caller(request)
    tenants.check_tenant_id(tenant_id)
    if who.authenticated and who.tenant_id != tenant_id:
        raise Forbidden("this API key belongs to another tenant")
    request.state.tenant_id = tenant_id  # the access line's tenant (local mode may name any)
    return tenant_id
