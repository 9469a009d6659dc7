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
