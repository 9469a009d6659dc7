"""`POST /v1/webhooks/processor` on the thin edge (ADR 0026, decision 4; SPEC §10).

The processor's webhook is authenticated by its signature, not by an API key, and its route
declares no body model: it reads its own bytes, and `inbound.service.verified_event` checks the
signature before anything else and then reads the event (`kit.strict_json`, the event's
pydantic model). So this edge reads every request itself and hands none to the FastAPI route
(which stays for the OpenAPI document): it calls `routers.processor_webhooks.webhook_answer`,
the one home of the answer both share, without FastAPI's per-request machinery (dependency
injection, its request wrapper). The plain case crosses no worker thread (on SQLite it joins the
group commit from the event loop, on PostgreSQL its one call is made on a connection of the
loop); SQLite's apply phase neither; PostgreSQL's apply phase and the reference path run on one
worker thread (`inbound/receive.py`'s `receive_async`).
A refusal (400 `invalid_signature`, `signature_timestamp_*`, `invalid_webhook`,
`duplicate_json_key`) is raised to the app's error handlers, as the route's is.
`tests/integration/http/test_webhooks_edge.py` holds the two to the same answers.
"""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.http.money.edge import Edge, Endpoint, fastapi_route
from paycore.http.routers import processor_webhooks as webhooks_router


class _WebhookEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await webhooks_router.webhook_answer(request, await request.body())
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_FALLBACK: Final = fastapi_route(webhooks_router.router, webhooks_router.processor_webhook)
ROUTE: Final = Edge(_FALLBACK, _WebhookEndpoint(_FALLBACK))
