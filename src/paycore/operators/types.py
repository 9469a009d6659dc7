"""Operators and what each role may do (ADR 0016).

Roles rank: a `viewer` reads every page; an `operator` also asks the processor again, redelivers
events, resolves reconciliation breaks, requests refunds, captures or cancels an authorized
payment, proposes manual resolutions and answers disputes (evidence; accept); an `approver`
also approves refunds and dispute accepts above the approval threshold, confirms (or rejects)
manual resolutions and changes a tenant's settings (the refund approval threshold, the manual
window: `tenants.settings`, where a tenant's API key may only tighten them). Four eyes are kept
by the rules themselves (refunds.service.approve, resolutions.service.confirm,
disputes.approvals.approver_may): nobody approves what they asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from sqlalchemy import Row

from paycore.db.metadata import ALL_TENANTS
from paycore.kit import actors

Role = Literal["viewer", "operator", "approver"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)
_RANK: Final[dict[str, int]] = {role: rank for rank, role in enumerate(ROLES)}

Action = Literal[
    "read",
    "ask_again",
    "redeliver",
    "resolve_break",
    "request_refund",
    "capture_payment",
    "cancel_payment",
    "cancel_payout",
    "propose_resolution",
    "answer_dispute",
    "cancel_refund",
    "approve_refund",
    "approve_dispute_accept",
    "confirm_resolution",
    "change_settings",
]
# The least role that may take each action. (Canceling a refund: an approver, or whoever asked
# for it: the console checks the second case against the refund's requester.)
LEAST_ROLE: Final[dict[Action, Role]] = {
    "read": "viewer",
    "ask_again": "operator",
    "redeliver": "operator",
    "resolve_break": "operator",
    "request_refund": "operator",
    "capture_payment": "operator",  # an authorization's capture or cancel (SPEC §6.1), as the API's
    "cancel_payment": "operator",
    "cancel_payout": "operator",  # a scheduled or queued payout's, its hold released (as the API's)
    "propose_resolution": "operator",
    # A dispute's evidence, or its accept at or below the tenant's approval threshold (above it
    # the accept waits for an approver other than who asked: `disputes.approvals`).
    "answer_dispute": "operator",
    "cancel_refund": "approver",
    "approve_refund": "approver",
    "approve_dispute_accept": "approver",
    "confirm_resolution": "approver",
    "change_settings": "approver",
}


def may(role: str, action: Action) -> bool:
    return _RANK[role] >= _RANK[LEAST_ROLE[action]]


@dataclass(frozen=True)
class Operator:
    tenant_id: str  # ALL_TENANTS: works across every tenant
    id: str
    name: str
    role: Role
    token_prefix: str
    created_at_us: int
    disabled_at_us: int | None

    @property
    def scope(self) -> str | None:
        """The one tenant they work in, or None for every tenant."""
        return None if self.tenant_id == ALL_TENANTS else self.tenant_id

    @property
    def actor(self) -> str:
        return actors.operator(self.name)


def operator_from_row(row: Row[Any] | Any) -> Operator:
    mapping = row._mapping if isinstance(row, Row) else row
    return Operator(
        tenant_id=mapping["tenant_id"],
        id=mapping["id"],
        name=mapping["name"],
        role=mapping["role"],
        token_prefix=mapping["token_prefix"],
        created_at_us=mapping["created_at_us"],
        disabled_at_us=mapping["disabled_at_us"],
    )


@dataclass(frozen=True)
class Principal:
    """Who is using the console now: a signed-in operator, or local mode's one developer
    (no API key and no operator exist; loopback only), who may do everything."""

    actor: str  # operator:NAME or local
    role: Role
    scope: str | None  # the one tenant they see, or None: every tenant
    operator: Operator | None = None
    session_id: str | None = None

    @property
    def name(self) -> str:
        return self.operator.name if self.operator is not None else actors.LOCAL

    def may(self, action: Action) -> bool:
        return may(self.role, action)

    def sees(self, tenant_id: str) -> bool:
        return self.scope is None or self.scope == tenant_id


LOCAL_PRINCIPAL: Final = Principal(actor=actors.LOCAL, role="approver", scope=None)
