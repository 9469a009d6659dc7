"""The webhook's side of the races between a webhook and the in-doubt resolver across two OS
processes on PostgreSQL (`test_*_across_processes.py`): one process delivering each object's
signed event through `inbound.receive.receive`, as the route does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paycore.inbound import receive as inbound
from paycore.inbound import service as inbound_service
from paycore.kit import signing
from paycore.kit.clock import now_us
from tests.integration.payments.test_settle_across_processes import _database


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
