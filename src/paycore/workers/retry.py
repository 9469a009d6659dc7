"""How a worker thread waits while the database cannot be reached."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

from paycore.config import DATABASE_RETRY_BACKOFF_MAX_MS, DATABASE_RETRY_BACKOFF_MS
from paycore.lifecycle.policy import Policy, backoff_ms

# Only the backoff of this policy is used: there is no item, lease or batch here.
_POLICY: Final = Policy(
    attempts_max=1,
    backoff_ms=DATABASE_RETRY_BACKOFF_MS,
    backoff_max_ms=DATABASE_RETRY_BACKOFF_MAX_MS,
    lease_ms=1,
    batch_max=1,
)


@dataclass
class DatabaseRetry:
    """The wait between tries while the database cannot be reached: exponential from
    DATABASE_RETRY_BACKOFF_MS to DATABASE_RETRY_BACKOFF_MAX_MS, equal jitter (the resolver's
    `backoff_ms`), so a fleet of workers does not come back in step."""

    attempts: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_wait_s(self) -> float:
        self.attempts += 1
        return backoff_ms(self.attempts, _POLICY, self.rng) / 1000

    def reset(self) -> None:
        self.attempts = 0
