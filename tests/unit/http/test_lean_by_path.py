"""`lean.by_literal_path` picks, for a path, the edge the loop over every edge picks."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from paycore.http.lean import by_literal_path, edges_of
from paycore.http.money import batches, credits, payment_operations, payments, payouts, refunds, transfers, webhooks
from paycore.http.money.edge import Edge, Endpoint, fastapi_route


def _first_by_loop(served: tuple[tuple[Edge, ASGIApp], ...], path: str) -> Edge | None:
    scope = {"type": "http", "method": "POST", "path": path, "root_path": ""}
    return next((edge for edge, _ in served if edge.matches(scope)[0] is Match.FULL), None)


def test_the_apps_edges() -> None:
    # In the router's order, as `http.app.create_app` inserts them.
    operations = (payment_operations.CANCEL_ROUTE, payment_operations.CAPTURE_ROUTE)
    firsts = (webhooks.ROUTE, payouts.CANCEL_ROUTE, payouts.ROUTE, refunds.ROUTE, *operations, payments.ROUTE)
    routes: tuple[Edge, ...] = (*firsts, batches.ROUTE, transfers.ROUTE, credits.ROUTE)
    served = tuple((edge, edge.app) for edge in edges_of(routes))
    found = by_literal_path(served)
    assert "/v1/payments" in found
    for path, ((edge, _),) in found.items():
        assert edge is _first_by_loop(served, path)


def _edge(path: str) -> Edge:
    router = APIRouter()

    async def endpoint() -> None:  # pragma: no cover - never called
        return None

    router.add_api_route(path, endpoint, methods=["POST"])
    fallback = fastapi_route(router, endpoint)

    class _App(Endpoint):
        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # pragma: no cover
            return None

    return Edge(fallback, _App(fallback))


def test_an_edge_ahead_that_matches_the_path_keeps_it_out() -> None:
    ahead, literal, other = _edge("/v1/things/{thing_id}"), _edge("/v1/things/count"), _edge("/v1/others")
    served = tuple((edge, edge.app) for edge in (ahead, literal, other))
    found = by_literal_path(served)
    assert "/v1/things/count" not in found  # the loop picks `ahead` for it
    assert _first_by_loop(served, "/v1/things/count") is ahead
    assert found["/v1/others"] == ((other, other.app),)
    assert _first_by_loop(served, "/v1/others") is other
