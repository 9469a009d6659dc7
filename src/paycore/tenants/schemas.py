"""The tenant settings API shape (`PUT /v1/settings`), strict: the threshold is required, and is
a JSON integer 0..2^53-1 or null; the manual window is optional (absent: unchanged), a JSON
integer of seconds 0..31,536,000."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.schemas import StrictModel
from paycore.tenants.settings import MANUAL_RESOLUTION_AFTER_SECONDS_MAX, TenantSettings

ThresholdMinor = Annotated[int, Field(strict=True, ge=0, le=AMOUNT_MINOR_MAX)]
WindowSeconds = Annotated[int, Field(strict=True, ge=0, le=MANUAL_RESOLUTION_AFTER_SECONDS_MAX)]


class SettingsUpdate(StrictModel):
    # A refund waits in requires_approval when its payment's refunds, it included, add up to more
    # than this; 0: every refund; null: none. A key may only lower it or set one (else 403).
    refund_approval_threshold_minor: ThresholdMinor | None
    # An item in doubt this long may be resolved by hand in the console; absent: unchanged.
    manual_resolution_after_seconds: WindowSeconds | None = Field(
        default=None,
        description="Seconds an item must have been in doubt before two people may resolve it by hand "
        "(default 259200: 72 h), a JSON integer 0..31536000: 1.0, a string or anything else is "
        "400 invalid_request. Left out (or null): unchanged. An API key may only lengthen it "
        "(shortening is 403 approver_required).",
    )


def settings_json(settings: TenantSettings) -> dict[str, Any]:
    return {
        "refund_approval_threshold_minor": settings.refund_approval_threshold_minor,
        "manual_resolution_after_seconds": settings.manual_resolution_after_seconds,
    }
