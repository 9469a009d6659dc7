"""The seeded random run with every actor at once: four payers (each retrying some of its
keys), two resolvers and a webhook deliverer run concurrently against one database, so the
API's answer, the resolver and webhooks race for the same payments.

It found that a change recorded after waiting for the write lock could carry an earlier time
than the change it followed (histories read backwards); `lifecycle.move` now never records
a change before the previous one. Seed: PAYCORE_CHAOS_SEED, as in test_chaos.py.
"""

from __future__ import annotations

import functools
import random
import threading
import traceback
from collections.abc import Callable
from typing import Any

from paycore.kit.clock import now_us
from paycore.ledger.verify import verify
from paycore.workers.jobs import WorkerContext, resolve_payments
from tests.integration.payments import test_chaos as chaos
from tests.integration.payments.conftest import Env

PAYERS = 4
RESOLVERS = 2
JOIN_TIMEOUT_S = 120


def test_concurrent_payers_resolvers_and_webhooks_agree(env: Env) -> None:
    print(f"chaos seed {chaos.SEED}")
    run = chaos.Run(env, random.Random(chaos.SEED))
    env.sandbox.set_fault_plan(chaos.fault_plan(chaos.SEED))
    stop = threading.Event()
    errors: list[str] = []
    lock = threading.Lock()
    indexes = iter(range(chaos.PAYMENTS))

    def repeat(work: Callable[[], Any]) -> Callable[[], None]:
        def body() -> None:
            while not stop.is_set():
                try:
                    work()
                except Exception:
                    errors.append(traceback.format_exc())
                stop.wait(0.005)

        return body

    def payer(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            with lock:
                index = next(indexes, None)
            if index is None:
                return
            token = rng.choice(sorted(chaos.TOKENS))
            body = {
                "amount_minor": rng.randint(1, chaos.AMOUNT_MINOR_MAX),
                "currency": "USD",
                "source": {"type": "card", "token": token},
                "destination_account": rng.choice(run.destinations),
            }
            key = f"concurrent-{index}"
            first = env.client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
            if first.status_code not in chaos.CREATION_STATUS:
                errors.append(f"{key}: {first.status_code} {first.text}")
                continue
            sent = chaos.Sent(key, body, token, first.status_code, first.json())
            with lock:
                run.sent.append(sent)
            if rng.random() < 0.5:
                again = env.client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
                if (again.status_code, again.json()) != (sent.status_code, sent.answer):
                    errors.append(f"{key}: replay {again.status_code} {again.text} != first {sent.answer}")

    contexts = [WorkerContext.create(env.database, run.context.settings, env.processor) for _ in range(RESOLVERS)]
    background = [threading.Thread(target=repeat(functools.partial(resolve_payments, c))) for c in contexts]
    background.append(threading.Thread(target=repeat(lambda: (env.sandbox.settle_due(), env.deliver()))))
    payers = [threading.Thread(target=payer, args=(chaos.SEED + n,)) for n in range(PAYERS)]
    for thread in [*background, *payers]:
        thread.start()
    for thread in payers:
        thread.join(JOIN_TIMEOUT_S)
    stop.set()
    for thread in background:
        thread.join(JOIN_TIMEOUT_S)
    assert not errors, errors[:3]
    assert len(run.sent) == chaos.PAYMENTS

    start = now_us()
    for round_number in range(1, chaos.ROUNDS_MAX + 1):
        later = start + chaos.FAR_FUTURE_US + round_number * chaos.HOUR_US
        run.settle(later)
        run.deliver(later)
        run.resolve()
        run.deliver(later)
        if not run.unresolved() and run.sandbox_backlog() == 0:
            break
    env.sandbox.clear_fault_plan()

    chaos.assert_agreement(run)
    chaos.assert_histories(run)
    run.check_books()
    with env.database.read() as connection:
        assert verify(connection).ok
