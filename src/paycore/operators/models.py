"""Operators, their console sessions and the sign-in throttle (ADR 0016).

`operators`: one row per person. `tenant_id` is the one tenant whose objects they see, or `*`
(ALL_TENANTS) for the platform's staff, who see every tenant. `name` is unique over all of them
(the CLI and the audit log's `operator:NAME` name them). Only a SHA-256 of the operator token is
stored, as for API keys. A disabled operator keeps their row (the audit log names them).

`operator_sessions`: a signed-in console session. Only a SHA-256 of the session cookie is
stored; the CSRF token is derived from the cookie (HMAC), so nothing in this table lets anyone
act. A session ends by sign-out, by its operator being disabled (`ended_at_us`), or by time:
`last_seen_us` older than the idle bound or `created_at_us` older than the absolute one.

`operator_sign_in_counts`: failed sign-ins in a window, by client address (an IPv6 address's
/64) and the operator name typed, plus one row per address (`operator_name` `*`) counting every
name's: too many for one name block that name at that address, too many in all block the
address (docs/operations-console.md, "Signing in"). Across every API process; a row whose
window and block have ended is deleted by a later failed sign-in.

`operator_sign_in_failures`: retired (one row per address: every operator behind it was blocked
together). Left for the processes of the release before, during a rolling deploy; nothing reads
it any more, and a later revision drops it.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    UniqueConstraint,
)

from paycore.db.metadata import ID_LENGTH, created_at_column, metadata, tenant_id_column
from paycore.kit.actors import OPERATOR_NAME_CHARS_MAX

ADDRESS_LENGTH = 64

operators = Table(
    "operators",
    metadata,
    tenant_id_column(),  # the tenant they work in, or `*`: every tenant
    Column("id", String(ID_LENGTH), nullable=False),
    Column("name", String(OPERATOR_NAME_CHARS_MAX), nullable=False),
    Column("role", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False),
    Column("token_prefix", String(16), nullable=False),
    created_at_column(),
    Column("disabled_at_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("tenant_id", "id"),
    CheckConstraint("role IN ('viewer', 'operator', 'approver')", name="role"),
    UniqueConstraint("name"),
    UniqueConstraint("token_hash"),
)

operator_sessions = Table(
    "operator_sessions",
    metadata,
    tenant_id_column(),  # the operator's
    Column("id", String(ID_LENGTH), nullable=False),
    Column("token_hash", String(64), nullable=False),
    Column("operator_id", String(ID_LENGTH), nullable=False),
    created_at_column(),
    Column("last_seen_us", BigInteger, nullable=False),
    Column("ended_at_us", BigInteger, nullable=True),
    Column("end_cause", String(16), nullable=True),  # signed_out | disabled
    PrimaryKeyConstraint("tenant_id", "id"),
    UniqueConstraint("token_hash"),
    Index("ix_operator_sessions_operator", "tenant_id", "operator_id"),
)

operator_sign_in_counts = Table(
    "operator_sign_in_counts",
    metadata,
    tenant_id_column(),  # always ALL_TENANTS: a failed sign-in is no tenant's
    Column("address", String(ADDRESS_LENGTH), nullable=False),
    Column("operator_name", String(OPERATOR_NAME_CHARS_MAX), nullable=False),  # as typed, or `*`: every name
    Column("window_start_us", BigInteger, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("blocked_until_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("tenant_id", "address", "operator_name"),
    Index("ix_operator_sign_in_counts_window", "window_start_us"),  # the ended rows, deleted
)

operator_sign_in_failures = Table(  # retired (see above)
    "operator_sign_in_failures",
    metadata,
    tenant_id_column(),  # always ALL_TENANTS: a failed sign-in names no one
    Column("address", String(ADDRESS_LENGTH), nullable=False),
    Column("window_start_us", BigInteger, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("blocked_until_us", BigInteger, nullable=True),
    PrimaryKeyConstraint("tenant_id", "address"),
)
