"""Tenants and API keys (SPEC §3.2).

An API key is 32 random bytes (`pck_` + URL-safe base64) shown once at creation; only its
SHA-256 is stored. A slow password hash is not needed: the key has 256 bits of entropy, so
the hash cannot be brute-forced, and a fast hash keeps authentication off the hot path.

Local mode: while no API key exists, requests act as the tenant named by the
`Paycore-Tenant` header (or `default`), and the server only binds loopback addresses.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.engine import Database
from paycore.kit import ids
from paycore.tenants import repository
from paycore.tenants.errors import InvalidTenantId, TenantExists

TENANT_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEFAULT_TENANT = "default"
KEY_PREFIX = "pck_"
# A key revoked by another process stops working in every server within this many seconds
# (each caches a key's owner this long: `http.context.AuthState`).
KEY_CACHE_PERIOD_S = 5


@dataclass(frozen=True)
class NewTenant:
    tenant_id: str
    api_key: str


def check_tenant_id(value: object, *, param: str = "tenant_id") -> str:
    if not isinstance(value, str) or TENANT_ID_PATTERN.fullmatch(value) is None:
        raise InvalidTenantId("a tenant id is 1-64 characters of [A-Za-z0-9_.-]", param=param)
    return value


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def create_tenant(connection: Connection, name: str, *, now_us: int) -> NewTenant:
    tenant_id = check_tenant_id(name, param="name")
    if not repository.insert_tenant(connection, {"tenant_id": tenant_id, "name": name, "created_at_us": now_us}):
        raise TenantExists(f"tenant {tenant_id!r} already exists")
    return NewTenant(tenant_id=tenant_id, api_key=issue_key(connection, tenant_id, now_us=now_us))


def issue_key(connection: Connection, tenant_id: str, *, now_us: int) -> str:
    api_key = KEY_PREFIX + secrets.token_urlsafe(32)
    _insert_key(connection, tenant_id, ids.new_id("key"), api_key, now_us=now_us)
    return api_key


def _insert_key(connection: Connection, tenant_id: str, key_id: str, api_key: str, *, now_us: int) -> None:
    repository.insert_api_key(
        connection,
        {
            "tenant_id": tenant_id,
            "id": key_id,
            "key_hash": hash_key(api_key),
            "key_prefix": api_key[:12],
            "created_at_us": now_us,
            "revoked_at_us": None,
        },
    )


def revoke_key(connection: Connection, tenant_id: str, key_id: str, *, actor: str, now_us: int) -> bool:
    """Revoke the tenant's API key `key_id` (the audit log's `api_key:KEY_ID`), recorded in the
    audit log as `api_key.revoked` by `actor`; False (and nothing recorded) when it is unknown or
    already revoked. A server process that caches keys drops it when told
    (`http.context.AuthState.revoke_key`); one that is not told (`paycore tenants revoke-key`
    runs in a process of its own) stops taking it within its cache's period."""
    return _revoke(connection, tenant_id, key_id, actor=actor, now_us=now_us, replaced_by=None)


def rotate_key(connection: Connection, tenant_id: str, key_id: str, *, actor: str, now_us: int) -> str | None:
    """A new API key for the tenant in place of `key_id`, revoked in the same transaction; None
    (and no key issued) when `key_id` is unknown or already revoked."""
    api_key = KEY_PREFIX + secrets.token_urlsafe(32)
    new_key_id = ids.new_id("key")
    if not _revoke(connection, tenant_id, key_id, actor=actor, now_us=now_us, replaced_by=new_key_id):
        return None
    _insert_key(connection, tenant_id, new_key_id, api_key, now_us=now_us)
    return api_key


def _revoke(
    connection: Connection, tenant_id: str, key_id: str, *, actor: str, now_us: int, replaced_by: str | None
) -> bool:
    if not repository.revoke_api_key(connection, tenant_id, key_id, now_us):
        return False
    audit.record_other(
        connection,
        tenant_id,
        kind="note",
        type="api_key.revoked",
        object_type="api_key",
        object_id=key_id,
        cause="key_rotated" if replaced_by else "key_revoked",
        actor=actor,
        now_us=now_us,
        data={"replaced_by": replaced_by},
    )
    return True


@dataclass(frozen=True)
class KeyInfo:
    """An API key as an operator may see it: never the key, only its id and first characters."""

    key_id: str
    key_prefix: str
    created_at_us: int
    revoked_at_us: int | None


def list_keys(connection: Connection, tenant_id: str, *, limit: int) -> list[KeyInfo]:
    """The tenant's API keys, oldest first, at most `limit` of them."""
    return [
        KeyInfo(
            key_id=str(row.id),
            key_prefix=str(row.key_prefix),
            created_at_us=int(row.created_at_us),
            revoked_at_us=None if row.revoked_at_us is None else int(row.revoked_at_us),
        )
        for row in repository.list_api_keys(connection, tenant_id, limit)
    ]


def tenant_ids(connection: Connection, wanted: list[str]) -> set[str]:
    """The tenants among `wanted` that exist."""
    return repository.existing_tenants(connection, wanted)


def first_tenant_ids(connection: Connection, *, limit: int) -> list[str]:
    """The first `limit` tenants, by id."""
    return [str(row.tenant_id) for row in repository.list_tenants(connection, limit)]


def tenants_ignoring_case(connection: Connection, wanted: list[str]) -> dict[str, str]:
    """The tenants whose ids equal one of `wanted` but for case, by lower-cased id (tenant ids
    are case-sensitive: `ACME` is not `acme`; this names the one that was probably meant)."""
    return repository.tenants_ignoring_case(connection, wanted)


def auth_required(connection: Connection) -> bool:
    return repository.any_api_key(connection)


def auth_required_now(database: Database) -> bool:
    """`auth_required` as one statement of its own, for the check of every request."""
    return repository.any_api_key_now(database)


@dataclass(frozen=True)
class KeyOwner:
    """Whose an API key is: its tenant, and the key's id (the audit log's `api_key:KEY_ID`)."""

    tenant_id: str
    key_id: str


def owner_of_key(connection: Connection, api_key: str) -> KeyOwner | None:
    return _owner(repository.find_key(connection, hash_key(api_key)))


async def owner_of_key_on_loop(database: Database, api_key: str) -> KeyOwner | None:
    """`owner_of_key` from the event loop, on PostgreSQL: no worker thread."""
    return _owner(await repository.find_key_on_loop(database, hash_key(api_key)))


def _owner(row: repository.KeyRow | None) -> KeyOwner | None:
    if row is None:
        return None
    tenant_id, key_id, revoked_at_us = row
    return None if revoked_at_us is not None else KeyOwner(tenant_id=tenant_id, key_id=key_id)
