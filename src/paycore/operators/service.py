"""Operators and their console sessions (ADR 0016). Every function runs in the
caller's transaction.

An operator token (`pco_` + 32 random bytes) is shown once, by `paycore operators create`; only
its SHA-256 is stored, as for API keys (256 bits of entropy: a fast hash cannot be brute-forced).
Signing in to the console exchanges it for a session: a cookie (`pcs_` + 32 random bytes) whose
SHA-256 is the session's key. The CSRF token of a session is an HMAC of its cookie, so it is
never stored and cannot be computed without the cookie.

A session ends when its operator signs out or is disabled, after `idle_ms` without a request,
or `max_ms` after it began, whichever comes first. A sign-in names the operator and gives their
token. Failed sign-ins are counted in the database (`sign_in`): per operator name typed and
client address, and per address over every name; past a bound within `window_ms`, that name at
that address, or the address, is blocked for `window_ms`. Every sign-in, failed sign-in and
sign-out is in the audit log.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from typing import Any, Final

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
ADDRESS_ROW: Final = "*"  # the throttle's row counting every name's failures from one address (no name starts with *)
SIGN_IN_ROWS_DELETED_MAX: Final = 100  # ended throttle rows deleted by one failed sign-in
OBJECT_TYPE: Final = "operator"


@dataclass(frozen=True)
class NewOperator:
    operator: Operator
    token: str  # shown once


@dataclass(frozen=True)
class SessionLimits:
    idle_ms: int
    max_ms: int
    failures_max: int  # failed sign-ins for one name from one address within window_ms that block the name there
    window_ms: int
    address_failures_max: int  # failed sign-ins from one address, every name, that block the address

    def __post_init__(self) -> None:
        assert 0 < self.failures_max <= self.address_failures_max, "an address bounds more than one name"


@dataclass(frozen=True)
class SignedIn:
    principal: Principal
    cookie: str  # the session cookie's value: set once, never stored


@dataclass(frozen=True)
class SignInRefused:
    reason: str  # invalid | throttled
    retry_after_s: int = 0
    blocked: str = ""  # throttled: `name` (this name from this address) or `address` (every name)


def hash_secret(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def csrf_token(cookie: str) -> str:
    """The session's CSRF token: an HMAC of its cookie (never stored)."""
    return hmac.new(cookie.encode(), b"paycore-ops-csrf", hashlib.sha256).hexdigest()


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
    """True while no API key and no operator exist (SPEC §3.2): requests
    need no key and the console no sign-in (loopback only), and the actor is `local`. Once a
    key or an operator exists it never ends again (neither is ever deleted)."""
    return not tenants.auth_required(connection) and not repository.any_operator(connection)


def local_mode_now(database: Database) -> bool:
    """`local_mode` as one statement of its own, for the check of every request."""
    return not repository.any_key_or_operator_now(database)


async def local_mode_on_loop(database: Database) -> bool:
    """`local_mode_now` from the event loop, on PostgreSQL: no worker thread."""
    return not await repository.any_key_or_operator_on_loop(database)


def any_operator(connection: Connection) -> bool:
    return repository.any_operator(connection)


def sign_in(
    connection: Connection, name: str, token: str, address: str, limits: SessionLimits, *, now_us: int
) -> SignedIn | SignInRefused:
    """Exchange an operator's name and token for a session, unless failed sign-ins block that
    name at this address or the address itself. A failure is counted and audited here and
    committed with the transaction: the caller answers a refusal without raising, so that the
    count is kept.

    Whether a name exists is never looked up: the token finds its operator (as always) and the
    name must be theirs. An unknown name and a wrong token are one and the same refusal, counted
    alike, so neither the answer nor the throttle tells a name that exists from one that does
    not. A name no operator could have (`actors.OPERATOR_NAME`) has no row of its own: it counts
    towards the address's bound only."""
    claimed = name.strip().lower()
    claimed = claimed if actors.OPERATOR_NAME.fullmatch(claimed) else ""
    counted = counted_address(address)
    counts = repository.sign_in_counts(connection, counted, (ADDRESS_ROW,))
    refused = _blocked(counts, now_us)
    if refused is None and claimed:  # a blocked address makes no row for any name
        counts |= repository.sign_in_counts(connection, counted, (claimed,))
        refused = _blocked(counts, now_us)
    if refused is not None:
        return refused
    row = repository.by_token_hash(connection, hash_secret(token)) if token.startswith(TOKEN_PREFIX) else None
    operator = None if row is None else operator_from_row(row)
    if operator is None or operator.disabled_at_us is not None or operator.name != claimed:
        _count_failure(connection, counted, counts, limits, now_us)
        _audit_failure(connection, operator, claimed, address[:ADDRESS_LENGTH], now_us)
        return SignInRefused("invalid")
    if counts[claimed].failures:  # the name's typos are forgiven; the address's count stays
        repository.set_sign_in_count(connection, counted, claimed, {"window_start_us": now_us, "failures": 0})
    return _new_session(connection, operator, address[:ADDRESS_LENGTH], now_us)


def counted_address(address: str) -> str:
    """Where an address's failed sign-ins are counted: the address itself, or for IPv6 its /64
    (one host is handed a /64 to pick addresses from: counted one by one, every new address
    would start afresh). An IPv4 address written as IPv6 (`::ffff:a.b.c.d`) is that IPv4."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:ADDRESS_LENGTH]  # not an address (a test client's name): counted as written
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def _blocked(counts: dict[str, Any], now_us: int) -> SignInRefused | None:
    """Refused while the address's block or the name's block lasts (the longer of the two)."""
    blocked = {key: row.blocked_until_us for key, row in counts.items() if (row.blocked_until_us or 0) > now_us}
    if not blocked:
        return None
    until_us = max(blocked.values())
    retry_after_s = max(1, -(-(until_us - now_us) // 1_000_000))
    return SignInRefused("throttled", retry_after_s, "address" if ADDRESS_ROW in blocked else "name")


def _count_failure(
    connection: Connection, address: str, counts: dict[str, Any], limits: SessionLimits, now_us: int
) -> None:
    """One more failure on each row (the address's, and the name's if it has one); a row that
    reaches its bound within the window is blocked for the window. Then the rows that count
    nothing any more are deleted, a bounded number at a time."""
    window_us = limits.window_ms * 1000
    for key, row in counts.items():
        window_start_us, failures = row.window_start_us, row.failures
        if now_us - window_start_us >= window_us:
            window_start_us, failures = now_us, 0
        failures += 1
        values: dict[str, int | None] = {"window_start_us": window_start_us, "failures": failures}
        if failures >= (limits.address_failures_max if key == ADDRESS_ROW else limits.failures_max):
            values.update(window_start_us=now_us, failures=0, blocked_until_us=now_us + window_us)
        repository.set_sign_in_count(connection, address, key, values)
    repository.delete_ended_sign_in_counts(
        connection, started_by_us=now_us - window_us, now_us=now_us, limit=SIGN_IN_ROWS_DELETED_MAX
    )


def _audit_failure(connection: Connection, operator: Operator | None, claimed: str, address: str, now_us: int) -> None:
    """`operator.login_failed`: by the token's operator if it has one (disabled, or another name
    typed), else by `anonymous`. The name typed is recorded only when it could be a name (a token
    pasted into the name field never reaches the audit log)."""
    if operator is None:
        reason = "unknown_token"
    else:
        reason = "disabled" if operator.disabled_at_us is not None else "name_mismatch"
    data = {"address": address, "reason": reason, "name": claimed or None}
    audit.record_access(
        connection,
        ALL_TENANTS if operator is None else operator.tenant_id,
        type="operator.login_failed",
        object_type=OBJECT_TYPE,
        object_id="unknown" if operator is None else operator.id,
        outcome="failed",
        actor=actors.ANONYMOUS if operator is None else operator.actor,
        now_us=now_us,
        data=data,
    )


def _new_session(connection: Connection, operator: Operator, address: str, now_us: int) -> SignedIn:
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
    if not is_second_person(actor, asked_by):
        raise SamePerson(f"the person who asked cannot also approve: {what} needs another approver")


def is_second_person(actor: str, asked_by: str | None) -> bool:
    """Whether `actor` is someone other than who asked (local mode's one developer always is):
    the console offers a second person's action only to them; `four_eyes` refuses the rest."""
    return actor == actors.LOCAL or actor != asked_by


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
