"""Liveness, readiness and metrics (SPEC §12)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from paycore.db import migrate
from paycore.http.errors import RETRY_AFTER_UNAVAILABLE_S, json_response
from paycore.http.metrics import CONTENT_TYPE
from paycore.http.routing import JsonRoute

router = APIRouter(tags=["operations"], route_class=JsonRoute)


@router.get("/healthz")
def healthz() -> Response:
    return json_response(200, {"status": "ok"})


@router.get("/readyz")
def readyz(request: Request) -> Response:
    database = request.app.state.database
    try:
        with database.read() as connection:
            connection.execute(text("SELECT 1"))
        state = migrate.schema_state(database)
    except Exception as error:  # any failure to reach the database means not ready
        return json_response(
            503,
            {"status": "unavailable", "database": "unreachable", "detail": type(error).__name__},
            headers={"Retry-After": str(RETRY_AFTER_UNAVAILABLE_S)},
        )
    if state == "behind":
        return json_response(503, {"status": "unavailable", "database": "ok", "migrations": "behind"})
    # current, or inside an expand/backfill/contract window this code supports (docs/migrations.md)
    return json_response(200, {"status": "ok", "database": "ok", "migrations": state})


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(request: Request) -> Response:
    """Prometheus text format."""
    body = await run_in_threadpool(request.app.state.metrics.render)
    return Response(body, media_type=CONTENT_TYPE)
