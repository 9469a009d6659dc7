"""Per-tenant settings of money rules (the `tenant_settings` table). A tenant without a row
has the defaults: no refund ever waits for approval."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.tenants import repository


@dataclass(frozen=True)
class TenantSettings:
    # Refunds of more than this amount wait in `requires_approval` for a person; None: never.
    refund_approval_threshold_minor: int | None = None


DEFAULTS = TenantSettings()


def get(connection: Connection, tenant_id: str) -> TenantSettings:
    row = repository.get_settings(connection, tenant_id)
    if row is None:
        return DEFAULTS
    return TenantSettings(refund_approval_threshold_minor=row.refund_approval_threshold_minor)


def set(connection: Connection, tenant_id: str, new: TenantSettings, *, now_us: int) -> TenantSettings:
    """Replace the tenant's settings; returns them as stored (read back: pair assertion)."""
    threshold = new.refund_approval_threshold_minor
    assert threshold is None or 0 <= threshold <= AMOUNT_MINOR_MAX, "validated at the edge"
    repository.put_settings(
        connection, tenant_id, {"refund_approval_threshold_minor": threshold, "updated_at_us": now_us}
    )
    stored = get(connection, tenant_id)
    assert stored == new
    return stored
