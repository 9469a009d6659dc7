"""`POST /v1/charges` served in one pass (`paycore_sandbox.charge_edge`): it answers a charge
without the FastAPI route, and every request answers as the route alone answers it (status,
headers, body), refusals, faults and replays included."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.testclient import TestClient

from paycore_sandbox import Sandbox
from paycore_sandbox.http import create_app

_CHARGE_ID = re.compile(rb"ch_[0-9A-Z]{26}")
_EXPIRY = re.compile(rb'"authorization_expires_at_us":[0-9]+')
_JSON = {"Content-Type": "application/json"}


def charge(request_id: str, **changes: Any) -> dict[str, Any]:
    return {"request_id": f"ID-{request_id}", "merchant_id": "m_1", "amount_minor": 1250, "currency": "USD",
            "token": "tok_ok", **changes}  # fmt: skip


def raw(body: Any) -> bytes:
    return json.dumps(body).encode()


# (body bytes, headers) in order: each side gets the same sequence, so replays and reuse match.
REQUESTS: list[tuple[bytes, dict[str, str]]] = [
    (raw(charge("c1")), _JSON),
    (raw(charge("c1")), _JSON),  # a replay
    (raw(charge("c1", amount_minor=99)), _JSON),  # the id reused: 409
    (raw(charge("c2", token="tok_declined")), _JSON),
    (raw(charge("c3", capture="manual", description="an order")), _JSON),
    (raw(charge("c4", token="tok_pending")), {"Content-Type": "application/json; charset=utf-8"}),
    (raw(charge("c5")), {}),  # no Content-Type: read as JSON
    (raw(charge("c6", token="tok_unknown")), _JSON),
    (raw(charge("c7", currency="XYZ")), _JSON),
    (raw(charge("c8", amount_minor=0)), _JSON),
    (raw(charge("c9", amount_minor=12.5)), _JSON),
    (raw(charge("c10", amount_minor="1250")), _JSON),
    (raw(charge("c11", extra=1)), _JSON),
    (raw({"request_id": "ID-c12"}), _JSON),
    (b'{"request_id": "ID-c13", "request_id": "ID-c14"}', _JSON),
    (b"{not json", _JSON),
    (b"", _JSON),
    (b"[1, 2]", _JSON),
    (raw(charge("c15")), {"Content-Type": "text/plain"}),
    (raw(charge("c16")), {"Content-Type": "application/vnd.api+json"}),
    (raw(charge("c17", token="tok_timeout")), _JSON),
    (b"x" * 70_000, _JSON),
]


def answers(sandbox: Sandbox, *, charge_edge: bool, request_prefix: str) -> list[tuple[int, Any, bytes]]:
    found = []
    with TestClient(create_app(sandbox, charge_edge=charge_edge)) as client:
        for body, headers in REQUESTS:
            sent = body.replace(b"ID-", request_prefix.encode())
            response = client.post("/v1/charges", content=sent, headers=headers)
            shown = _EXPIRY.sub(b'"authorization_expires_at_us":0', _CHARGE_ID.sub(b"ch_ID", response.content)).replace(
                request_prefix.encode(), b"ID-"
            )
            found.append((response.status_code, sorted(response.headers.items()), shown))
    return found


def test_every_charge_request_answers_as_the_route_alone(sandbox_on_backend: Sandbox) -> None:
    sandbox = sandbox_on_backend
    sandbox.set_fault_plan({"seed": 7, "hold_ms": 1, "rules": [{"fault": "error_500", "next_n": 1, "ops": ["charge"]}]})
    routed = answers(sandbox, charge_edge=False, request_prefix="r-")
    sandbox.set_fault_plan({"seed": 7, "hold_ms": 1, "rules": [{"fault": "error_500", "next_n": 1, "ops": ["charge"]}]})
    edged = answers(sandbox, charge_edge=True, request_prefix="e-")

    assert edged == routed
    statuses = [status for status, _, _ in edged]
    assert statuses.count(200) >= 5 and {400, 409, 415, 500}.issubset(statuses), statuses


def test_a_charge_is_answered_without_the_fastapi_route(sandbox: Sandbox) -> None:
    app = create_app(sandbox)
    # The route gone, only the edge can answer a charge (the router would say 405: GET is left).
    app.router.routes[:] = [route for route in app.router.routes if getattr(route, "path", None) != "/v1/charges"]
    with TestClient(app) as client:
        answer = client.post("/v1/charges", json=charge("edge-1"))
        refused = client.post("/v1/charges", json=charge("edge-2", extra=1))

    assert answer.status_code == 200 and answer.json()["status"] == "succeeded", answer.text
    assert refused.status_code in (404, 405), "a body the edge does not take goes to the app"
