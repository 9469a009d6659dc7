"""Every bound of the sandbox, named, in one place (units last)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DEFAULT_DATABASE_URL: Final = "sqlite:///./paycore-sandbox.db"
DEFAULT_WEBHOOK_URL: Final = "http://127.0.0.1:8000/v1/webhooks/processor"
DEFAULT_WEBHOOK_SECRET: Final = "whsec_sandbox_dev"

REQUEST_ID_LENGTH_MAX: Final = 255
MERCHANT_ID_LENGTH_MAX: Final = 64
TOKEN_LENGTH_MAX: Final = 64
DESCRIPTION_LENGTH_MAX: Final = 1000

HOLD_MS_MAX: Final = 60_000  # how long the HTTP server sits on a dropped request or answer
DELAY_MS_MAX: Final = 60_000
SETTLE_LATE_MS_MAX: Final = 86_400_000
RULES_MAX: Final = 50
NEXT_N_MAX: Final = 1_000_000


@dataclass(frozen=True)
class SandboxSettings:
    """Defaults of a run and the bounds of the background work."""

    hold_ms: int = 1_000  # used when no fault plan says otherwise
    settle_late_ms: int = 2_000  # tok_pending, and settle_late without a plan value
    webhook_attempts_max: int = 20
    webhook_backoff_ms_first: int = 500
    webhook_backoff_ms_max: int = 60_000
    webhook_timeout_ms: int = 5_000
    webhook_batch_max: int = 100
    settle_batch_max: int = 100
    background_rounds_max: int = 100  # per wake-up of the background loop
    lease_ms: int = 30_000  # a webhook being sent is not picked up by another deliverer meanwhile
    report_rows_per_fetch: int = 500

    def __post_init__(self) -> None:
        assert 0 <= self.hold_ms <= HOLD_MS_MAX
        assert 0 <= self.settle_late_ms <= SETTLE_LATE_MS_MAX
        assert self.webhook_attempts_max >= 1
        assert 1 <= self.webhook_backoff_ms_first <= self.webhook_backoff_ms_max
        assert self.webhook_timeout_ms >= 1
        assert self.webhook_batch_max >= 1 and self.settle_batch_max >= 1
        assert self.lease_ms > self.webhook_timeout_ms, "a lease outlives the send it covers"
