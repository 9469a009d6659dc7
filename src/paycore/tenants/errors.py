from __future__ import annotations

from paycore.kit.errors import Conflict, DomainError, Forbidden, InvalidRequest


class InvalidTenantId(InvalidRequest):
    code = "invalid_tenant_id"


class TenantExists(Conflict):
    code = "tenant_exists"


class Unauthorized(DomainError):
    code = "unauthorized"


# Forbidden is kit's (the ledger refuses with it too), named here as well for the callers that
# check access.
__all__ = ["Forbidden", "InvalidTenantId", "TenantExists", "Unauthorized"]
