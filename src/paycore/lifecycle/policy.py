"""One retry policy for every worker: bounded batches, a lease, exponential backoff with
jitter, and when to give up (after a number of rounds, or once a retry window is over), after
which a person takes over or the tenant redelivers. Payments, refunds and payouts
(`in_doubt.resolver`), webhook deliveries and their endpoints (`webhooks.rounds`), the processor's
events matched again (`inbound.rematch.rematch_due`) and a worker waiting out the database
(`workers.retry`) all back off through `delay_ms` and give up through `retry_at_us`."""

from __future__ import annotations

import random
from dataclasses import dataclass

_DOUBLINGS_MAX = 30  # 2**30 times the first delay is past every cap: no unbounded integer


@dataclass(frozen=True)
class Backoff:
    first_ms: int  # the first retry's delay; doubles per round
    max_ms: int  # the cap


@dataclass(frozen=True)
class Policy:
    attempts_max: int  # rounds before the item is left to a person (never guessed)
    backoff_ms: int  # the first retry's delay; doubles per round
    backoff_max_ms: int
    lease_ms: int  # a worker's claim lapses after this
    batch_max: int  # items per round

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.backoff_ms, self.backoff_max_ms)


def delay_ms(attempt: int, backoff: Backoff, rng: random.Random) -> int:
    """The wait after `attempt` (1 for the first) in whole milliseconds: exponential, capped,
    with "equal jitter": between half and all of the capped delay, so that items (or workers)
    that failed together do not come back together."""
    capped = min(backoff.max_ms, backoff.first_ms * 2 ** min(max(attempt, 1) - 1, _DOUBLINGS_MAX))
    half: int = capped // 2
    return half + rng.randint(0, capped - half)


def backoff_ms(attempt: int, policy: Policy, rng: random.Random) -> int:
    """`delay_ms` with a worker policy's backoff."""
    return delay_ms(attempt, policy.backoff, rng)


def retry_at_us(
    attempt: int,
    backoff: Backoff,
    rng: random.Random,
    *,
    now_us: int,
    attempts_max: int | None = None,
    until_us: int | None = None,
) -> int | None:
    """When to try again after `attempt` tries; None: give up, because `attempts_max` tries
    were made or the retry window ending at `until_us` is over. None for both: never give up."""
    if attempts_max is not None and attempt >= attempts_max:
        return None
    if until_us is not None and now_us >= until_us:
        return None
    return now_us + delay_ms(attempt, backoff, rng) * 1000


def next_attempt_at_us(
    attempts: int, policy: Policy, rng: random.Random, *, now_us: int, give_up: bool = True
) -> int | None:
    """When to work the item again after `attempts` rounds; None: give up (out of rounds)."""
    limit = policy.attempts_max if give_up else None
    return retry_at_us(attempts, policy.backoff, rng, now_us=now_us, attempts_max=limit)
