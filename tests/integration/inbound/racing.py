"""The webhook's side of the races between a webhook and the in-doubt resolver across two OS
processes on PostgreSQL (`test_*_across_processes.py`): one process delivering each object's
signed event through `inbound.receive.receive`, as the route does."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from paycore.inbound import receive as inbound
from paycore.inbound import service as inbound_service
from paycore.kit import signing
from paycore.kit.clock import now_us
from tests.integration.payments.test_settle_across_processes import _database

BARRIER_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 120
ON_THE_DATA_PLANE = "webhook on the data plane"
RACES_MAX = 3  # races of fresh objects until both sides were seen to win


def race(
    url: str,
    object_ids: list[str],
    event: Callable[[str], bytes],
    resolver: Callable[..., None],
    resolver_args: Sequence[Any] = (),
) -> tuple[dict[str, tuple[str, bool]], int]:
    """The webhook process (last object first) against `resolver(url, barrier, rounds,
    *resolver_args)` (first object first), started together: each object's (result, whether
    the reference path answered), and how many rounds the resolver ran."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=BARRIER_TIMEOUT_S)
    webhook_results, resolver_rounds = context.Queue(), context.Queue()
    hook = context.Process(target=webhook_process, args=(url, object_ids[::-1], barrier, webhook_results, event))
    other = context.Process(target=resolver, args=(url, barrier, resolver_rounds, *resolver_args))
    hook.start()
    other.start()
    hook.join(JOIN_TIMEOUT_S)
    other.join(JOIN_TIMEOUT_S)
    assert (hook.exitcode, other.exitcode) == (0, 0)
    results = dict(webhook_results.get(timeout=5) for _ in object_ids)
    return results, int(resolver_rounds.get(timeout=5))


def winners(
    object_ids: list[str], results: dict[str, tuple[str, bool]], check_one: Callable[[str], str]
) -> Counter[str]:
    """Who moved each object (`check_one`: `webhook` or `resolver`, its rows checked), the
    webhook's answer `applied` exactly where it won."""
    found: Counter[str] = Counter()
    for object_id in object_ids:
        winner = check_one(object_id)
        result, by_reference = results[object_id]
        assert (result == "applied") == (winner == "webhook"), (object_id, result, winner)
        found[winner if winner == "resolver" or by_reference else ON_THE_DATA_PLANE] += 1
    return found


def until_both_win(race_once: Callable[[], Counter[str]]) -> tuple[Counter[str], int]:
    """`race_once()` (fresh objects raced, every one's rows checked: its `winners`) run until both
    sides were seen to win some, the webhook on the data plane, at most `RACES_MAX` times: on a
    loaded machine one side's process can be starved through a whole race. The winners summed,
    and how many races ran."""
    found: Counter[str] = Counter()
    for raced in range(1, RACES_MAX + 1):
        found += race_once()
        if found["resolver"] >= 1 and found[ON_THE_DATA_PLANE] >= 1:
            return found, raced
    raise AssertionError(f"one side never won in {RACES_MAX} races: {dict(found)}")


def webhook_process(url: str, object_ids: list[str], barrier: Any, results: Any, event: Callable[[str], bytes]) -> None:
    """Deliver each object's event (`event`, a module's function: spawn pickles it by name), in
    the order given, after the barrier; put (object id, (result, whether the reference path
    answered)) on `results`."""
    database = _database(url)
    secret = database.settings.processor_webhook_secret
    real, referenced = inbound_service.receive, []

    def spy(*args: Any, **kwargs: Any) -> inbound_service.Received:
        referenced.append(True)
        return real(*args, **kwargs)

    inbound_service.receive = spy  # this process's own module: whether the reference path answered
    barrier.wait()
    for object_id in object_ids:
        body = event(object_id)
        signature = signing.sign(secret, now_us() // 1_000_000, body)
        referenced.clear()
        received = inbound.receive(database, secret, signature, body)
        results.put((object_id, (received.result, bool(referenced))))
    database.dispose()
