"""What the thin edges' equivalence tests share (tests/integration/http/test_*_edge.py): an app
without the edge, the count of bodies an edge handed to the FastAPI route."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from starlette.routing import BaseRoute

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.processor.port import Processor


def without_edge(
    settings: Settings, database: Database, edge: BaseRoute, processor: Processor | None = None
) -> FastAPI:
    """paycore's app with `edge` taken out: the FastAPI route answers every body."""
    app = create_app(settings, database, processor)
    app.router.routes.remove(edge)
    return app


def count_hand_overs(monkeypatch: pytest.MonkeyPatch, endpoint: type[Any]) -> list[str]:
    """The paths of the requests `endpoint` (an edge's endpoint class) hands to the FastAPI route."""
    seen: list[str] = []
    hand_over = endpoint._hand_over

    async def counted(self: Any, scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])
        await hand_over(self, scope, receive, send)

    monkeypatch.setattr(endpoint, "_hand_over", counted)
    return seen
