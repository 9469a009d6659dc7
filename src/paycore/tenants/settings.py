"""Per-tenant settings of money rules (the `tenant_settings` table). A tenant without a row
has the defaults: no refund ever waits for approval, and an item in doubt for 72 hours may be
resolved by hand (issue 28). Every change is audited with its actor."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.tenants import repository

MANUAL_RESOLUTION_AFTER_SECONDS_DEFAULT: Final = 259_200  # 72 h
MANUAL_RESOLUTION_AFTER_SECONDS_MAX: Final = 31_536_000  # 365 days


@dataclass(frozen=True)
class TenantSettings:
    # Refunds of more than this amount wait in `requires_approval` for a person; None: never.
    refund_approval_threshold_minor: int | None = None
    # An item in doubt this long may be resolved by hand (propose, then a second person confirms).
    manual_resolution_after_seconds: int = MANUAL_RESOLUTION_AFTER_SECONDS_DEFAULT


DEFAULTS = TenantSettings()


def get(connection: Connection, tenant_id: str) -> TenantSettings:
    row = repository.get_settings(connection, tenant_id)
    if row is None:
        return DEFAULTS
    window = row.manual_resolution_after_seconds
    return TenantSettings(
        refund_approval_threshold_minor=row.refund_approval_threshold_minor,
        manual_resolution_after_seconds=MANUAL_RESOLUTION_AFTER_SECONDS_DEFAULT if window is None else window,
    )


def set(connection: Connection, tenant_id: str, new: TenantSettings, *, actor: str, now_us: int) -> TenantSettings:
    """Replace the tenant's settings, audited with who changed them from what to what; returns
    them as stored (read back: pair assertion)."""
    threshold = new.refund_approval_threshold_minor
    assert threshold is None or 0 <= threshold <= AMOUNT_MINOR_MAX, "validated at the edge"
    assert 0 <= new.manual_resolution_after_seconds <= MANUAL_RESOLUTION_AFTER_SECONDS_MAX, "validated at the edge"
    before = get(connection, tenant_id)
    values = {**asdict(new), "updated_at_us": now_us}
    repository.put_settings(connection, tenant_id, values)
    stored = get(connection, tenant_id)
    assert stored == new
    audit.record_other(
        connection,
        tenant_id,
        kind="note",
        type="settings.updated",
        object_type="settings",
        object_id=tenant_id,
        cause="settings_changed",
        actor=actor,
        now_us=now_us,
        data={"from": asdict(before), "to": asdict(stored)},
    )
    return stored
