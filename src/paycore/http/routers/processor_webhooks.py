"""SPEC §10: webhooks from the processor. Authenticated by signature, not by API key."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from paycore.http.errors import json_response
from paycore.http.responses import ERRORS
from paycore.http.routing import JsonRoute
from paycore.inbound import receive as webhooks
from paycore.inbound.service import Received
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
    events and events for objects not known yet (kept and matched again later). The plain case
    on the data plane (`inbound/receive.py`), everything else `inbound.service.receive`."""
    body = await request.body()
    secret = request.app.state.settings.processor_webhook_secret
    signature = request.headers.get(SIGNATURE_HEADER)
    received = await _in_thread(request, secret, signature, body)
    return json_response(200, {"received": True, "event_id": received.event_id, "result": received.result})


async def _in_thread(request: Request, secret: str, signature: str | None, body: bytes) -> Received:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(webhooks.receive, request.app.state.database, secret, signature, body)
