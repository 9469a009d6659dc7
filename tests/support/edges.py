"""What the thin edges' equivalence tests share (tests/integration/http/test_*_edge.py): an app
without the edge, the count of bodies an edge handed to the FastAPI route, and one request sent
as a case says, its answer made comparable across two databases."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.routing import BaseRoute

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.processor.port import Processor

JSON = "application/json"
NO_KEY = ""  # a case that sends no Idempotency-Key header
# Who answers a case: the edge itself, or the FastAPI route handed the body by the edge (or the
# middleware before any route: BodyLimit's 415), as the number of hand-overs to the route.
EDGE, ROUTE, NO_ROUTE = 0, 1, 0
_NEW_ID = re.compile(r"\b[a-z]{2,8}_[0-9A-Za-z]{20,32}\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def without_edge(
    settings: Settings, database: Database, edge: BaseRoute, processor: Processor | None = None
) -> FastAPI:
    """paycore's app with `edge` taken out: the FastAPI route answers every body."""
    app = create_app(settings, database, processor)
    app.router.routes.remove(edge)
    return app


def count_hand_overs(monkeypatch: pytest.MonkeyPatch, *endpoints: type[Any]) -> list[str]:
    """The paths of the requests the `endpoints` (edges' endpoint classes) hand to the FastAPI route."""
    seen: list[str] = []
    for endpoint in endpoints:
        hand_over = endpoint._hand_over

        async def counted(self: Any, scope: Any, receive: Any, send: Any, hand_over: Any = hand_over) -> None:
            seen.append(scope["path"])
            await hand_over(self, scope, receive, send)

        monkeypatch.setattr(endpoint, "_hand_over", counted)
    return seen


def post(
    client: TestClient,
    names: dict[bytes, bytes],
    path: str,
    body: bytes,
    key: str | tuple[str, ...],
    content_type: str | None,
    **headers: str,
) -> tuple[Any, ...]:
    """(status, headers, body) of a POST, each `names` key in the path and body (`@A`: an id this
    database made) replaced by its value, and ids and times the database made masked."""
    for name, made in names.items():
        body = body.replace(name, made)
        path = path.replace(name.decode(), made.decode())
    sent = [("X-Request-Id", "same-id"), *headers.items()]
    sent += [("Idempotency-Key", one) for one in ((key,) if isinstance(key, str) else key) if one != NO_KEY]
    if content_type is not None:
        sent.append(("Content-Type", content_type))
    response = client.post(path, content=body, headers=sent)
    return response.status_code, dict(response.headers), mask(response.text)


def make_accounts(client: TestClient, accounts: Mapping[str, Any], **headers: str) -> dict[bytes, bytes]:
    """Each of `accounts` made through `POST /v1/accounts`, in order: the new ids by name as a
    body names them (`@A`), for `post`."""
    made = {}
    for name, body in accounts.items():
        response = client.post("/v1/accounts", json=body, headers=headers)
        assert response.status_code == 201, response.text
        made[f"@{name}".encode()] = response.json()["id"].encode()
    return made


def mask(text: str) -> str:
    """`text` with the ids and times a database (or a sandbox) made masked: they differ from one
    database to the other."""
    return _TIME.sub("<time>", _NEW_ID.sub("<id>", text))
