"""`chaos`: N random operations with random faults, from a seed (SPEC §8)."""

from __future__ import annotations

import random
from typing import Any

from paycore.simulate.scenarios import Story

FAULTS = ("drop_request", "drop_response", "error_500", "delay_ms", "duplicate_webhook", "settle_late")
PAYMENTS = 5
DRAIN_ROUNDS_MAX = 30


def chaos(story: Story, *, seed: int, ops: int) -> None:
    rng = random.Random(seed)
    world = story.world
    world.say("driver", f"chaos: seed {seed}, {ops} operations")
    payments = [story.pay(rng.randint(100, 5_000)) for _ in range(PAYMENTS)]
    keys: list[tuple[str, int, str]] = []
    for step in range(ops):
        roll = rng.random()
        if roll < 0.45:
            payment = rng.choice(payments)
            amount = rng.randint(1, 2_000)
            key = f"chaos-{step}"
            if keys and rng.random() < 0.2:
                payment, amount, key = rng.choice(keys)  # a client retrying an earlier request
            keys.append((payment, amount, key))
            story.refund(payment, amount, key)
        elif roll < 0.65:
            world.run_workers()
        elif roll < 0.8:
            world.faults(*_random_rules(rng), seed=rng.randrange(1 << 30))
        else:
            world.settle_and_deliver()
    world.faults()
    for _ in range(DRAIN_ROUNDS_MAX):
        world.run_workers()
        world.settle_and_deliver()
        if not _unresolved(story, payments):
            return
    raise AssertionError(f"refunds still unresolved after {DRAIN_ROUNDS_MAX} rounds: {_unresolved(story, payments)}")


def _random_rules(rng: random.Random) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for fault in rng.sample(FAULTS, rng.randint(0, 2)):
        rule: dict[str, Any] = {"fault": fault, "percent": rng.choice((20, 50)), "ops": ["refund"]}
        if fault == "delay_ms":
            rule["delay_ms"] = rng.choice((50, 2_500))
        if fault in ("drop_request", "drop_response", "error_500", "delay_ms") and rng.random() < 0.5:
            rule["ops"] = ["refund", "get_refund"]
        rules.append(rule)
    return rules


def _unresolved(story: Story, payments: list[str]) -> list[str]:
    found = []
    for payment in payments:
        for refund in story.world.get(f"/v1/payments/{payment}/refunds?limit=100")["data"]:
            if refund["status"] in ("pending", "processing", "in_doubt"):
                found.append(refund["id"])
    return found
