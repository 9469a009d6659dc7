from __future__ import annotations

from paycore.kit.errors import Conflict, DomainError, Forbidden, InvalidRequest


class InvalidTenantId(InvalidRequest):
    code = "invalid_tenant_id"


class TenantExists(Conflict):
    code = "tenant_exists"


class Unauthorized(DomainError):
    code = "unauthorized"


class ApproverRequired(Forbidden):
    """A change of the tenant's settings that loosens a control (four eyes, the manual window)
    needs an approver in the console; an API key may only tighten them."""

    code = "approver_required"


# Forbidden is kit's (the ledger refuses with it too), named here as well for the callers that
# check access.
__all__ = ["ApproverRequired", "Forbidden", "InvalidTenantId", "TenantExists", "Unauthorized"]
