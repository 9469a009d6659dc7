"""`test_payment_operations_edge.py`'s requests again, the sandbox processors served over plain
HTTP: the capture and cancel edges then answer from the event loop (`payments/operations_on_loop.py`,
ADR 0026 decision 4) and must still answer every request, good and bad, in the same order, as
the FastAPI routes answer it (the same status, headers and JSON body, new ids and times aside),
and leave the payments in the same states."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import payment_operations as money_operations
from paycore.payments import operations_on_loop
from paycore.processor.http_transport import HttpTransport
from paycore_sandbox.http import create_app as create_sandbox_app
from paycore_sandbox.inprocess import InProcessTransport
from tests.integration.http.test_payment_operations_edge import CASES, _made
from tests.support import edges
from tests.support.servers import serve_in_thread

TIMEOUT_MS = 5_000  # generous: a loaded machine must not turn a slow answer into in_doubt


def test_every_request_is_answered_as_the_fastapi_routes_answer_it_from_the_loop(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
    monkeypatch: Any,
) -> None:
    handed_over = edges.count_hand_overs(
        monkeypatch, money_operations._CaptureEndpoint, money_operations._CancelEndpoint
    )
    from_the_loop: list[str] = []
    for name in ("capture", "cancel"):
        real = getattr(operations_on_loop, name)

        async def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            from_the_loop.append(_name)
            return await _real(*args, **kwargs)

        monkeypatch.setattr(operations_on_loop, name, counted)
    other_settings, other_database = other
    edge_box, route_box = (sandbox.sandbox for sandbox in sandboxes)
    with (
        serve_in_thread(create_sandbox_app(edge_box)) as edge_url,
        serve_in_thread(create_sandbox_app(route_box)) as route_url,
    ):
        with_edge = create_app(settings, database, HttpTransport(edge_url, timeout_ms=TIMEOUT_MS))
        without = edges.without_edge(
            other_settings,
            other_database,
            money_operations.CAPTURE_ROUTE,
            HttpTransport(route_url, timeout_ms=TIMEOUT_MS),
        )
        without.router.routes.remove(money_operations.CANCEL_ROUTE)
        with TestClient(with_edge) as edge, TestClient(without) as route:
            edge_made, route_made = _made(edge), _made(route)
            not_on_loop = []
            for name, path, body, key, content_type, hand_overs in CASES:
                before, loop_before = len(handed_over), len(from_the_loop)
                answered = edges.post(edge, edge_made, path, body, key, content_type)
                assert answered == edges.post(route, route_made, path, body, key, content_type), name
                assert len(handed_over) == before + hand_overs, name
                if len(from_the_loop) == loop_before:
                    not_on_loop.append(name)
            statuses = [
                [
                    client.get(f"/v1/payments/{made[f'@{n}'.encode()].decode()}").json()["status"]
                    for n in ("A1", "A2", "A4")
                ]
                for client, made in ((edge, edge_made), (route, route_made))
            ]
    assert statuses[0] == statuses[1] == ["succeeded", "succeeded", "canceled"]
    # Every request the edges serve reaches the loop's service, but those without a key (refused
    # first); the route answers the others.
    without_a_key = {"no Idempotency-Key", "a cancel without a key"}
    assert not_on_loop == [case[0] for case in CASES if case[5] == edges.ROUTE or case[0] in without_a_key]
