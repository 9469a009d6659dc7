"""The tenant settings API shape (`PUT /v1/settings`), strict: the field is required, and is a
JSON integer 0..2^53-1 or null."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from paycore.kit.money import AMOUNT_MINOR_MAX
from paycore.schemas import StrictModel
from paycore.tenants.settings import TenantSettings

ThresholdMinor = Annotated[int, Field(strict=True, ge=0, le=AMOUNT_MINOR_MAX)]


class SettingsUpdate(StrictModel):
    # Refunds of more than this wait in requires_approval; 0: every refund; null: none.
    refund_approval_threshold_minor: ThresholdMinor | None


def settings_json(settings: TenantSettings) -> dict[str, Any]:
    return {"refund_approval_threshold_minor": settings.refund_approval_threshold_minor}
