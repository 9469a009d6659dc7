"""Who is using the console, and the guards of every action (ADR 0016).

- A page needs a signed-in operator: the `paycore_ops` cookie names a server-side session
  (`operators.service`). Without one a page redirects to `/ops/login` and an action is 401; a
  tenant's API key opens nothing here (it is not a session).
- Local mode (no API key and no operator exist; ExposureGuard keeps it to loopback) opens the
  console without signing in; the actor is `local`.
- Every action is a POST form whose hidden `csrf_token` matches the session's (an HMAC of its
  cookie; in local mode, of this process's secret): otherwise 403 and nothing changes.
- The cookie is HttpOnly, SameSite=Strict, scoped to /ops, and Secure whenever the request
  arrived on a non-loopback address (the server is then not bound to loopback).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from fastapi import Request
from fastapi.responses import Response

from paycore.db.engine import Database
from paycore.http.context import AuthState
from paycore.http.exposure import arrived_off_loopback
from paycore.kit.clock import now_us
from paycore.kit.signing import same_secret
from paycore.operators import service as operators
from paycore.operators.service import SessionLimits
from paycore.operators.types import LOCAL_PRINCIPAL, Principal

COOKIE: Final = "paycore_ops"
CSRF_FIELD: Final = "csrf_token"
FORM_FIELDS_MAX: Final = 50  # a console form has a handful of fields
FORM_VALUE_CHARS_MAX: Final = 4_000


class SignInRequired(Exception):
    """No session: a page redirects to the sign-in form, an action is 401."""


class CsrfRefused(Exception):
    """A POST without the session's CSRF token: 403, nothing changes."""


class FormRefused(Exception):
    """A form the console cannot read (too many fields, a repeated field, too long a value)."""


@dataclass
class OpsState:
    """The console's per-application state: the session bounds and local mode's CSRF secret."""

    database: Database
    auth: AuthState
    limits: SessionLimits
    local_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))


def principal(request: Request) -> Principal:
    """The signed-in operator (or local mode's developer) of this request: a dependency of every
    console route. Kept on the request."""
    known: Principal | None = getattr(request.state, "principal", None)
    if known is not None:
        return known
    state: OpsState = request.app.state.ops
    if not state.auth.is_auth_required():
        request.state.principal = LOCAL_PRINCIPAL
        return LOCAL_PRINCIPAL
    cookie = request.cookies.get(COOKIE)
    if not cookie:
        raise SignInRequired
    now = now_us()
    with state.database.read() as connection:
        found = operators.session_of(connection, cookie, state.limits, now_us=now)
    if found is None:
        raise SignInRequired
    if found.stale:
        state.database.transaction(lambda connection: operators.touch(connection, found.principal, now_us=now))
    request.state.principal = found.principal
    return found.principal


def csrf_token(request: Request) -> str:
    """The token every form of this page carries (also in `<meta name="csrf-token">`)."""
    state: OpsState = request.app.state.ops
    cookie = request.cookies.get(COOKIE)
    if principal(request).operator is None or not cookie:
        return hmac.new(state.local_secret, b"paycore-ops-local", hashlib.sha256).hexdigest()
    return operators.csrf_token(cookie)


async def form(request: Request, long_fields: Mapping[str, int] | None = None) -> dict[str, str]:
    """The URL-encoded form of a POST, its CSRF token checked (CsrfRefused otherwise). Each
    field once (FormRefused for a repeated one, or one holding a NUL), at most FORM_FIELDS_MAX
    of them. `long_fields`: the fields allowed more than FORM_VALUE_CHARS_MAX characters, with
    their own bound (a dispute's evidence: 20,000)."""
    fields = await read_form(request, long_fields)
    sent = fields.pop(CSRF_FIELD, None)
    if sent is None or not same_secret(csrf_token(request), sent):
        raise CsrfRefused
    return fields


async def read_form(request: Request, long_fields: Mapping[str, int] | None = None) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", errors="replace")
    pairs = urllib.parse.parse_qsl(body, keep_blank_values=True, max_num_fields=FORM_FIELDS_MAX)
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name in fields:
            raise FormRefused(f"the field {name!r} is sent twice")
        if "\x00" in name or "\x00" in value:  # as the API's JSON and every query: PostgreSQL text holds no NUL
            raise FormRefused(f"the field {name!r} may not contain the NUL character")
        chars_max = (long_fields or {}).get(name, FORM_VALUE_CHARS_MAX)
        if len(value) > chars_max:
            raise FormRefused(f"the field {name!r} is longer than {chars_max} characters")
        fields[name] = value
    return fields


def set_session_cookie(request: Request, response: Response, cookie: str) -> None:
    state: OpsState = request.app.state.ops
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=state.limits.max_ms // 1000,
        path="/ops",
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(COOKIE, path="/ops", httponly=True, samesite="strict", secure=secure(request))


def secure(request: Request) -> bool:
    """Secure whenever the connection arrived on a non-loopback address, or over TLS."""
    server = request.scope.get("server")
    return request.url.scheme == "https" or (server is not None and arrived_off_loopback(server[0]))


def client_address(request: Request) -> str:
    """The address failed sign-ins are counted under (the proxy's client when it is trusted)."""
    return request.client.host if request.client is not None else "unknown"
