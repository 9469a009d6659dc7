"""`POST /v1/charges`, the sandbox's call of every payment, in one pass (`ChargeEdge`).

Served by FastAPI, a charge crossed the exception middleware, the exit stack, the router,
FastAPI's request handling (its dependencies, its body field's validation) and anyio's thread
hop before its endpoint: about half of the sandbox process's Python CPU under a payment load
(docs/benchmarks.md, the sandbox's own cost). `ChargeEdge` sits inside `BodyLimit` (which has
already refused what it refuses) and the server-error middleware (which still answers an
unexpected error with the app's 500 handler), and for a charge it takes:

- reads the body whole, as FastAPI does, through the same `strict_json` reader;
- validates it with the same `ChargeBody` (a strict model: what FastAPI's validation of the
  body field accepts, it accepts, into the same request);
- runs the same `_respond` (fault plan, holds, delays, refusals, busy) on one of the process's
  blocking threads (`paycore.kit.threads.run_blocking`: the caller's context copied, at most
  40 at once, as anyio's limiter allowed), and sends the `Response` it returns as it is.

Anything else goes to the app unchanged, the body it read handed on as it came: another path
or method, a body that is not `application/json`, a client that hung up before its body was
whole, a body that is not JSON, repeats a key or fails the model. So every refusal is still
FastAPI's own and the app's handlers' (`tests/integration/sandbox/test_charge_edge.py` sends
the same requests to both).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paycore.kit import strict_json
from paycore.kit.threads import run_blocking
from paycore.processor.port import ChargeRequest
from paycore_sandbox.schemas import ChargeBody, render
from paycore_sandbox.service import Sandbox

PATH: Final = "/v1/charges"
_JSON: Final = "application/json"


class ChargeEdge:
    def __init__(self, app: ASGIApp, sandbox: Sandbox, respond: Any) -> None:
        self.app = app
        self.sandbox = sandbox
        self.respond = respond  # http._respond: the one way a call is answered

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH or not _json(scope):
            await self.app(scope, receive, send)
            return
        messages: deque[Message] = deque()
        body = bytearray()
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":  # the client hung up: the app answers as ever
                await self.app(scope, _replay(messages, receive), send)
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        request = _charge_request(body)
        if request is None:
            await self.app(scope, _replay(messages, receive), send)
            return
        response: Response = await run_blocking(self._answer, request)
        await response(scope, receive, send)

    def _answer(self, request: ChargeRequest) -> Response:
        """What `http.create_charge` answers, on a blocking thread."""
        sandbox = self.sandbox
        decision = sandbox.decide("charge")
        response: Response = self.respond(
            sandbox,
            decision,
            lambda: (200, render(sandbox.charge(request, decision))),
            answer_lost=sandbox.answer_lost(request),
        )
        return response


def _json(scope: Scope) -> bool:
    """The body is `application/json` (BodyLimit gives a body without a type that one)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            media_type: str = bytes(value).decode("latin-1").partition(";")[0].strip().lower()
            return media_type == _JSON
    return False


def _charge_request(body: bytes | bytearray) -> ChargeRequest | None:
    """The charge the body asks for, or None for anything the app refuses (its own answer)."""
    if not body:
        return None
    try:
        return ChargeBody.model_validate(strict_json.loads(body)).to_request()
    except Exception:  # not JSON, a repeated key, not a valid charge: the app's refusal, unchanged
        return None


def _replay(messages: deque[Message], receive: Receive) -> Receive:
    """`receive` for the app: the messages already read, then the connection's own."""

    async def replayed() -> Message:
        return messages.popleft() if messages else await receive()

    return replayed
