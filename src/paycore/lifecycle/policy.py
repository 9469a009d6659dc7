"""One retry policy for every worker: bounded batches, a lease, exponential backoff with
jitter, and a number of rounds after which a person takes over."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    attempts_max: int  # rounds before the item is left to a person (never guessed)
    backoff_ms: int  # the first retry's delay; doubles per round
    backoff_max_ms: int
    lease_ms: int  # a worker's claim lapses after this
    batch_max: int  # items per round


def backoff_ms(attempt: int, policy: Policy, rng: random.Random) -> int:
    """Exponential, capped, with "equal jitter": between half and all of the capped delay."""
    capped = min(policy.backoff_max_ms, policy.backoff_ms * 2 ** min(attempt - 1, 30))
    half: int = capped // 2
    return half + rng.randint(0, capped - half)


def next_attempt_at_us(
    attempts: int, policy: Policy, rng: random.Random, *, now_us: int, give_up: bool = True
) -> int | None:
    """When to work the item again after `attempts` rounds; None: give up (out of rounds)."""
    if give_up and attempts >= policy.attempts_max:
        return None
    return now_us + backoff_ms(attempts, policy, rng) * 1000
