"""Operators and their console sessions (issue 28, ADR 0016). Every function runs in the
caller's transaction.

An operator token (`pco_` + 32 random bytes) is shown once, by `paycore operators create`; only
its SHA-256 is stored, as for API keys (256 bits of entropy: a fast hash cannot be brute-forced).
Signing in to the console exchanges it for a session: a cookie (`pcs_` + 32 random bytes) whose
SHA-256 is the session's key. The CSRF token of a session is an HMAC of its cookie, so it is
never stored and cannot be computed without the cookie.

A session ends when its operator signs out or is disabled, after `idle_ms` without a request,
or `max_ms` after it began, whichever comes first. Failed sign-ins are counted per client
address in the database: `failures_max` within `window_ms` block the address for `window_ms`.
Every sign-in, failed sign-in and sign-out is in the audit log.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.engine import Database
from paycore.db.metadata import ALL_TENANTS
from paycore.kit import actors, ids
from paycore.operators import repository
from paycore.operators.errors import (
    InvalidOperatorName,
    InvalidRole,
    OperatorExists,
    OperatorNotFound,
    OperatorRequired,
    RoleRequired,
    SamePerson,
    UnknownTenant,
)
from paycore.operators.models import ADDRESS_LENGTH
from paycore.operators.types import LEAST_ROLE, ROLES, Action, Operator, Principal, operator_from_row
from paycore.tenants import service as tenants

TOKEN_PREFIX: Final = "pco_"
COOKIE_PREFIX: Final = "pcs_"
OPERATORS_MAX: Final = 10_000  # `paycore operators list` shows at most this many
_TOUCH_EVERY_US: Final = 60_000_000  # a session's last request is written at most once a minute
OBJECT_TYPE: Final = "operator"


@dataclass(frozen=True)
class NewOperator:
    operator: Operator
    token: str  # shown once


@dataclass(frozen=True)
class SessionLimits:
    idle_ms: int
    max_ms: int
    failures_max: int  # failed sign-ins from one address within window_ms that block it
    window_ms: int


@dataclass(frozen=True)
class SignedIn:
    principal: Principal
    cookie: str  # the session cookie's value: set once, never stored


@dataclass(frozen=True)
class SignInRefused:
    reason: str  # invalid | throttled
    retry_after_s: int = 0


def hash_secret(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def csrf_token(cookie: str) -> str:
    """The session's CSRF token: an HMAC of its cookie (never stored)."""
    return hmac.new(cookie.encode(), b"paycore-ops-csrf", hashlib.sha256).hexdigest()


def csrf_matches(cookie: str, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(csrf_token(cookie), sent)


def create_operator(connection: Connection, name: str, role: str, *, tenant_id: str | None, now_us: int) -> NewOperator:
    """A new operator, their token shown once. `tenant_id`: the one tenant they work in (it
    must exist), or None for every tenant."""
    if not isinstance(name, str) or actors.OPERATOR_NAME.fullmatch(name) is None:
        raise InvalidOperatorName(
            f"an operator name is 1-{actors.OPERATOR_NAME_CHARS_MAX} characters of [a-z0-9_.-], "
            "starting with a letter or digit",
            param="name",
        )
    if role not in ROLES:
        raise InvalidRole(f"role must be one of {', '.join(ROLES)}", param="role")
    if tenant_id is not None and tenant_id not in tenants.tenant_ids(connection, [tenant_id]):
        raise UnknownTenant(f"no tenant {tenant_id!r}: create it with `paycore tenants create`", param="tenant")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    values = {
        "tenant_id": ALL_TENANTS if tenant_id is None else tenant_id,
        "id": ids.new_id("op"),
        "name": name,
        "role": role,
        "token_hash": hash_secret(token),
        "token_prefix": token[:12],
        "created_at_us": now_us,
        "disabled_at_us": None,
    }
    if not repository.insert_operator(connection, values):
        raise OperatorExists(f"an operator named {name!r} exists already", param="name")
    operator = operator_from_row(values)
    _audit(connection, operator, "operator.created", "created", actors.LOCAL, now_us, {"role": role})
    return NewOperator(operator, token)


def list_operators(connection: Connection) -> list[Operator]:
    return [operator_from_row(row) for row in repository.all_operators(connection, limit=OPERATORS_MAX)]


def disable_operator(connection: Connection, name: str, *, now_us: int) -> Operator:
    """Disable the operator; their sessions end at once. Disabling again changes nothing."""
    row = repository.by_name(connection, name)
    if row is None:
        raise OperatorNotFound(f"no operator named {name!r}", param="name")
    operator = operator_from_row(row)
    if operator.disabled_at_us is not None:
        return operator
    repository.disable(connection, operator.tenant_id, operator.id, now_us)
    ended = repository.end_sessions(
        connection, operator.tenant_id, operator_id=operator.id, session_id=None, cause="disabled", now_us=now_us
    )
    _audit(connection, operator, "operator.disabled", "disabled", actors.LOCAL, now_us, {"sessions_ended": ended})
    return Operator(**{**operator.__dict__, "disabled_at_us": now_us})


def local_mode(connection: Connection) -> bool:
    """True while no API key and no operator exist (SPEC §3.2, widened by issue 28): requests
    need no key and the console no sign-in (loopback only), and the actor is `local`. Once a
    key or an operator exists it never ends again (neither is ever deleted)."""
    return not tenants.auth_required(connection) and not repository.any_operator(connection)


def local_mode_now(database: Database) -> bool:
    """`local_mode` as one statement of its own, for the check of every request."""
    return not repository.any_key_or_operator_now(database)


def any_operator(connection: Connection) -> bool:
    return repository.any_operator(connection)


def sign_in(
    connection: Connection, token: str, address: str, limits: SessionLimits, *, now_us: int
) -> SignedIn | SignInRefused:
    """Exchange an operator token for a session, unless the address is blocked. A failure is
    counted and audited here and committed with the transaction: the caller answers a refusal
    without raising, so that the count is kept."""
    address = address[:ADDRESS_LENGTH]
    failures = repository.sign_in_failures(connection, address)
    blocked_until_us = failures.blocked_until_us
    if blocked_until_us is not None and blocked_until_us > now_us:
        retry_after_s = max(1, -(-(blocked_until_us - now_us) // 1_000_000))
        return SignInRefused("throttled", retry_after_s)
    row = repository.by_token_hash(connection, hash_secret(token)) if token.startswith(TOKEN_PREFIX) else None
    operator = None if row is None else operator_from_row(row)
    if operator is None or operator.disabled_at_us is not None:
        _count_failure(connection, address, failures.window_start_us, failures.failures, limits, now_us)
        data = {"address": address, "reason": "disabled" if operator is not None else "unknown_token"}
        tenant_id = ALL_TENANTS if operator is None else operator.tenant_id
        audit.record_access(
            connection,
            tenant_id,
            type="operator.login_failed",
            object_type=OBJECT_TYPE,
            object_id="unknown" if operator is None else operator.id,
            outcome="failed",
            actor=actors.ANONYMOUS if operator is None else operator.actor,
            now_us=now_us,
            data=data,
        )
        return SignInRefused("invalid")
    cookie = COOKIE_PREFIX + secrets.token_urlsafe(32)
    session_id = ids.new_id("ses")
    repository.insert_session(
        connection,
        {
            "tenant_id": operator.tenant_id,
            "id": session_id,
            "token_hash": hash_secret(cookie),
            "operator_id": operator.id,
            "created_at_us": now_us,
            "last_seen_us": now_us,
            "ended_at_us": None,
            "end_cause": None,
        },
    )
    _audit(connection, operator, "operator.login", "succeeded", operator.actor, now_us, {"address": address})
    principal = Principal(operator.actor, operator.role, operator.scope, operator, session_id)
    return SignedIn(principal, cookie)


def _count_failure(
    connection: Connection, address: str, window_start_us: int, failures: int, limits: SessionLimits, now_us: int
) -> None:
    if now_us - window_start_us >= limits.window_ms * 1000:
        window_start_us, failures = now_us, 0
    failures += 1
    values: dict[str, int | None] = {"window_start_us": window_start_us, "failures": failures}
    if failures >= limits.failures_max:
        values.update(window_start_us=now_us, failures=0, blocked_until_us=now_us + limits.window_ms * 1000)
    repository.set_sign_in_failures(connection, address, values)


@dataclass(frozen=True)
class Found:
    principal: Principal
    stale: bool  # the session's last request is older than a minute: write it (`touch`)


def session_of(connection: Connection, cookie: str, limits: SessionLimits, *, now_us: int) -> Found | None:
    """The signed-in operator of a session cookie, or None: unknown, ended, idle for longer
    than `idle_ms`, older than `max_ms`, or its operator disabled. A read."""
    if not cookie.startswith(COOKIE_PREFIX):
        return None
    row = repository.session_with_operator(connection, hash_secret(cookie))
    if row is None or row.ended_at_us is not None or row.disabled_at_us is not None:
        return None
    if now_us - row.last_seen_us >= limits.idle_ms * 1000 or now_us - row.session_created_at_us >= limits.max_ms * 1000:
        return None
    operator = operator_from_row(row)
    principal = Principal(operator.actor, operator.role, operator.scope, operator, row.session_id)
    return Found(principal, stale=now_us - row.last_seen_us >= _TOUCH_EVERY_US)


def touch(connection: Connection, principal: Principal, *, now_us: int) -> None:
    """Keep the session alive: its last request is now."""
    assert principal.operator is not None and principal.session_id is not None
    repository.touch_session(connection, principal.operator.tenant_id, principal.session_id, now_us)


def sign_out(connection: Connection, principal: Principal, *, now_us: int) -> None:
    operator = principal.operator
    if operator is None or principal.session_id is None:
        return  # local mode: nobody is signed in
    repository.end_sessions(
        connection,
        operator.tenant_id,
        operator_id=operator.id,
        session_id=principal.session_id,
        cause="signed_out",
        now_us=now_us,
    )
    _audit(connection, operator, "operator.logout", "succeeded", operator.actor, now_us, {})


def require_person(actor: str, *, what: str) -> None:
    """OperatorRequired unless `actor` is a person: an operator, or local mode's developer."""
    if actor != actors.LOCAL and actors.operator_name(actor) is None:
        raise OperatorRequired(f"{what} is a person's act: sign in to the console (/ops)")


def four_eyes(actor: str, asked_by: str, *, what: str) -> None:
    """The one rule of a second person's word (a refund's approval, a manual resolution's
    confirmation): `actor` is a person (an operator, or local mode's one developer, who is
    alone by definition) other than `asked_by`. OperatorRequired for anyone else (an API key, a
    worker), SamePerson for the one who asked."""
    require_person(actor, what=what)
    if actor != actors.LOCAL and actor == asked_by:
        raise SamePerson(f"the person who asked cannot also approve: {what} needs another approver")


def require(principal: Principal, action: Action) -> None:
    """RoleRequired unless the principal's role allows `action`."""
    if not principal.may(action):
        least = LEAST_ROLE[action]
        raise RoleRequired(f"this needs the role {least} (you are {principal.role})", role=least)


def _audit(
    connection: Connection,
    operator: Operator,
    type: str,
    outcome: str,
    actor: str,
    now_us: int,
    data: dict[str, object],
) -> None:
    audit.record_access(
        connection,
        operator.tenant_id,
        type=type,
        object_type=OBJECT_TYPE,
        object_id=operator.id,
        outcome=outcome,
        actor=actor,
        now_us=now_us,
        data={"operator": operator.name, **data},
    )
