"""The app serves its routers' routes as they are (`paycore.http.routing.add_routes`), not
through `include_router`. That holds only while a route of an `APIRouter` carries everything
the router gives it: its prefix, tags, dependencies (authentication), `include_in_schema`. This
test holds the two ways to the same routes, and fails on the first FastAPI where they differ."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from paycore.http import app as http_app
from paycore.http import console
from paycore.http.routing import _routes

ALL_ROUTERS = (*http_app.ROUTERS, *console.ROUTERS)


def _described(routes: Any) -> list[tuple[Any, ...]]:
    """Each of the routers' routes: what it serves and what runs before it (FastAPI's own routes,
    /openapi.json and the docs, are left out)."""
    described = []
    for route in _routes(routes):
        if not isinstance(route, APIRoute):
            continue
        dependencies = tuple(getattr(depends.dependency, "__name__", "?") for depends in route.dependencies)
        served = (route.path, tuple(sorted(route.methods or ())), route.name, route.include_in_schema)
        described.append((*served, tuple(route.tags), dependencies))
    return sorted(described)


def test_the_routes_are_what_include_router_would_serve() -> None:
    included = FastAPI()
    for router in ALL_ROUTERS:
        included.include_router(router)
    added = FastAPI()
    added.router.routes.extend(route for router in ALL_ROUTERS for route in router.routes)
    assert _described(added.routes) == _described(included.routes)
    assert any(dependencies for *_, dependencies in _described(added.routes)), "some routes authenticate"
    assert get_openapi(title="t", version="1", routes=added.routes) == get_openapi(
        title="t", version="1", routes=included.routes
    )


def test_every_app_shares_the_route_objects_made_at_import(client: Any) -> None:
    served = {id(route) for route in client.app.routes}
    assert all(id(route) in served for router in ALL_ROUTERS for route in router.routes)
