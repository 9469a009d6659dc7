"""What outgoing webhooks hand to their callers: an endpoint, a delivery, an attempt."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    tenant_id: str
    id: str
    url: str
    events: tuple[str, ...]  # the types it takes, or ("*",)
    description: str | None
    status: str  # enabled | disabled | deleted
    disabled_reason: str | None
    secret: str
    previous_secret: str | None
    previous_secret_until_us: int | None
    failures: int
    failing_since_us: int | None
    last_error: str | None
    blocked_until_us: int | None
    claimed_by: str | None
    claimed_until_us: int | None
    served_at_us: int | None
    created_at_us: int
    updated_at_us: int

    def secrets(self, now_us: int) -> tuple[str, ...]:
        """The secrets a delivery is signed with now: the current one, and the previous one
        while a rotation's overlap lasts."""
        if self.previous_secret is not None and (self.previous_secret_until_us or 0) > now_us:
            return (self.secret, self.previous_secret)
        return (self.secret,)


@dataclass(frozen=True)
class Delivery:
    tenant_id: str
    id: str
    event_id: str
    endpoint_id: str
    status: str  # pending | delivered | failed | canceled
    attempts: int
    next_attempt_at_us: int | None
    last_status_code: int | None
    last_error: str | None
    delivered_at_us: int | None
    created_at_us: int
    updated_at_us: int


@dataclass(frozen=True)
class Attempt:
    tenant_id: str
    id: str
    delivery_id: str
    event_id: str
    endpoint_id: str
    attempt: int
    outcome: str  # delivered | failed
    status_code: int | None
    latency_ms: int
    error: str | None
    response_excerpt: str | None
    worker: str
    created_at_us: int
