"""Per-tenant settings of money rules (the `tenant_settings` table). A tenant without a row
has the defaults: no refund ever waits for approval, and an item in doubt for 72 hours may be
resolved by hand.

Two of them are controls, and a change that loosens one needs an approver (`loosened`): raising
the refund approval threshold or clearing it (more money leaves without a second person), and
shortening the manual-resolution window (an item may be settled by hand sooner). An approver
changes them in the console; a tenant's API key may only tighten them (lower the threshold, set
one where there was none, lengthen the window), and a loosening by it is ApproverRequired with
nothing changed. Every change, either way, is audited here with its actor and the settings
before and after."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Final

from sqlalchemy import Connection, Row

from paycore.audit import service as audit
from paycore.kit import actors
from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.tenants import repository
from paycore.tenants.errors import ApproverRequired

MANUAL_RESOLUTION_AFTER_SECONDS_DEFAULT: Final = 259_200  # 72 h
MANUAL_RESOLUTION_AFTER_SECONDS_MAX: Final = 31_536_000  # 365 days


@dataclass(frozen=True)
class TenantSettings:
    # A refund waits in `requires_approval` for a person when its payment's refunds that are
    # not failed or canceled, it included, add up to more than this; None: never.
    refund_approval_threshold_minor: int | None = None
    # An item in doubt this long may be resolved by hand (propose, then a second person confirms).
    manual_resolution_after_seconds: int = MANUAL_RESOLUTION_AFTER_SECONDS_DEFAULT


DEFAULTS = TenantSettings()
# How each loosening reads in a refusal, by the field it changes.
_LOOSENINGS: Final = {
    "refund_approval_threshold_minor": "raising or clearing refund_approval_threshold_minor",
    "manual_resolution_after_seconds": "shortening manual_resolution_after_seconds",
}


def get(connection: Connection, tenant_id: str) -> TenantSettings:
    row = repository.get_settings(connection, tenant_id)
    return DEFAULTS if row is None else _from_row(row)


def _from_row(row: Row[Any]) -> TenantSettings:
    window = row.manual_resolution_after_seconds
    return TenantSettings(
        refund_approval_threshold_minor=row.refund_approval_threshold_minor,
        manual_resolution_after_seconds=MANUAL_RESOLUTION_AFTER_SECONDS_DEFAULT if window is None else window,
    )


def loosened(before: TenantSettings, after: TenantSettings) -> tuple[str, ...]:
    """The fields whose change from `before` to `after` loosens a control: the threshold raised
    or cleared (a threshold set where there was none, or lowered, tightens), the manual window
    shortened (lengthened tightens). Unchanged values loosen nothing."""
    fields: list[str] = []
    old, new = before.refund_approval_threshold_minor, after.refund_approval_threshold_minor
    if old is not None and (new is None or new > old):
        fields.append("refund_approval_threshold_minor")
    if after.manual_resolution_after_seconds < before.manual_resolution_after_seconds:
        fields.append("manual_resolution_after_seconds")
    return tuple(fields)


def set(
    connection: Connection,
    tenant_id: str,
    change: Callable[[TenantSettings], TenantSettings],
    *,
    actor: str,
    by_approver: bool,
    now_us: int,
) -> TenantSettings:
    """Replace the tenant's settings with `change(current)`, audited with who changed them from
    what to what; returns them as stored (read back: pair assertion). The settings row is locked
    first and `change` gets it as it is then (a field the caller leaves out keeps that value),
    so concurrent changes are each judged against the last. `by_approver`: the actor is a
    person whose role may approve (the console's check, or local mode's one developer);
    otherwise a change that loosens a control is ApproverRequired and nothing is written."""
    defaults = {**asdict(DEFAULTS), "updated_at_us": now_us}
    before = _from_row(repository.lock_settings(connection, tenant_id, defaults))
    new = change(before)
    threshold = new.refund_approval_threshold_minor
    assert threshold is None or 0 <= threshold <= AMOUNT_MINOR_MAX, "validated at the edge"
    assert 0 <= new.manual_resolution_after_seconds <= MANUAL_RESOLUTION_AFTER_SECONDS_MAX, "validated at the edge"
    person = actor == actors.LOCAL or actors.operator_name(actor) is not None
    assert person or not by_approver, "an approver is a person"
    loose = loosened(before, new)
    if loose and not by_approver:
        what = " and ".join(_LOOSENINGS[field] for field in loose)
        raise ApproverRequired(
            f"{what} loosens a control: only an approver may, in the console (/ops/settings); nothing was changed",
            param=loose[0],
        )
    repository.update_settings(connection, tenant_id, {**asdict(new), "updated_at_us": now_us})
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
