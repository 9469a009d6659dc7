from __future__ import annotations

from paycore.kit.errors import Conflict, DomainError, InvalidRequest


class InvalidTenantId(InvalidRequest):
    code = "invalid_tenant_id"


class TenantExists(Conflict):
    code = "tenant_exists"


class Unauthorized(DomainError):
    code = "unauthorized"


class Forbidden(DomainError):
    code = "forbidden"


class ApproverRequired(Forbidden):
    """A change of the tenant's settings that loosens a control (four eyes, the manual window)
    needs an approver in the console; an API key may only tighten them."""

    code = "approver_required"
