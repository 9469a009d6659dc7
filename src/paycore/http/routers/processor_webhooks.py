"""SPEC §10: webhooks from the processor. Authenticated by signature, not by API key."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from paycore.http.errors import json_response
from paycore.http.responses import ERRORS
from paycore.http.routing import JsonRoute
from paycore.inbound import receive as webhooks
from paycore.kit.signing import SIGNATURE_HEADER

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], route_class=JsonRoute)

_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    "parameters": [
        {
            "name": SIGNATURE_HEADER,
            "in": "header",
            "required": True,
            "description": "t=<unix seconds>,v1=<hex HMAC-SHA256 of 't.body'>; 5 minutes' tolerance",
            "schema": {"type": "string"},
        }
    ],
}


@router.post("/processor", responses=ERRORS, openapi_extra=_BODY)
async def processor_webhook(request: Request) -> Response:
    """Verify, store once per event id, apply what it proves. 200 also for duplicates, stale
    events and events for objects not known yet (kept and matched again later)."""
    return await webhook_answer(request, await request.body())


async def webhook_answer(request: Request, body: bytes) -> Response:
    """The one home of the webhook's answer, for this route and its thin edge
    (`http/money/webhooks.py`): the plain case on the data plane from the event loop, no thread
    hop (`inbound/receive.py`'s `receive_async`), and SQLite's apply phase too; PostgreSQL's
    apply phase and the reference path on a worker thread."""
    secret = request.app.state.settings.processor_webhook_secret
    signature = request.headers.get(SIGNATURE_HEADER)
    received = await webhooks.receive_async(
        request.app.state.database, secret, signature, body, in_thread=run_in_threadpool
    )
    return json_response(200, {"received": True, "event_id": received.event_id, "result": received.result})
