from __future__ import annotations

from paycore.kit.errors import Conflict, InvalidRequest, NotFound
from paycore.tenants.errors import Forbidden


class InvalidOperatorName(InvalidRequest):
    code = "invalid_operator_name"


class InvalidRole(InvalidRequest):
    code = "invalid_role"


class UnknownTenant(InvalidRequest):
    code = "unknown_tenant"


class OperatorExists(Conflict):
    code = "operator_exists"


class OperatorNotFound(NotFound):
    code = "operator_not_found"


class RoleRequired(Forbidden):
    """The operator's role does not allow this action (details: `role`, the least that does)."""

    code = "role_required"


class OperatorRequired(Forbidden):
    """A person's act (approving a refund, confirming a manual resolution): an operator in the
    console, never an API key (nor anyone but local mode's single developer)."""

    code = "operator_required"


class SamePerson(Forbidden):
    """Four eyes: the person who asked for something never approves it too."""

    code = "same_person"
