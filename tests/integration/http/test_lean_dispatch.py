"""The money requests' one pass (paycore.http.lean) answers as the full middleware stack does:
the same requests, sent in the same order as raw ASGI calls to an app as served and to one with
`lean_edges` off (each on its own fresh database, with its own sandbox processor), get the same
status, headers and body (ids and times a database made aside), the same access lines, the same
latency series, the same refusals in the audit log, and raise the same error to the server.
Successes and refusals alike: 413 (by length and streamed), 415, a NUL, the exposure guard's
403, 401, 404, validation's 400, a domain's 422, and an unhandled error's 500."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import MutableMapping
from typing import Any

import pytest
from fastapi import FastAPI

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.lean import LeanDispatch
from paycore.http.money.edge import Edge, Endpoint, fastapi_route
from paycore.http.routers import ledger as ledger_router
from paycore.http.routers import payments as payments_router
from paycore.kit.clock import now_us
from paycore.tenants import service as tenants
from paycore_sandbox.inprocess import InProcessTransport
from tests.support import edges

BODY_BYTES_MAX = 4096
LOOPBACK = ("127.0.0.1", 8000)
JSON_TYPE = [(b"content-type", b"application/json")]


def _payment(**fields: Any) -> bytes:
    body = {"amount_minor": 500, "currency": "USD", "source": {"type": "card", "token": "tok_ok"}}
    return json.dumps({**body, "destination_account": "@A", **fields}).encode()


def _credit(key: str, amount_minor: Any) -> bytes:
    return json.dumps(
        {"idempotency_key": key, "lines": [{"desc": "d", "amount_minor": amount_minor, "currency": "USD"}]}
    ).encode()


# (what it is, path, body chunks, headers beyond the request id, the local address, query)
Case = tuple[str, str, list[bytes], list[tuple[bytes, bytes]], tuple[str, int], bytes]
CASES: list[Case] = [
    ("a payment", "/v1/payments", [_payment()], [(b"idempotency-key", b"p1"), *JSON_TYPE], LOOPBACK, b""),
    ("its replay", "/v1/payments", [_payment()], [(b"idempotency-key", b"p1"), *JSON_TYPE], LOOPBACK, b""),
    ("without a type", "/v1/payments", [_payment(amount_minor=7)], [(b"idempotency-key", b"p2")], LOOPBACK, b""),
    (
        "a bool amount",
        "/v1/payments",
        [_payment(amount_minor=True)],
        [(b"idempotency-key", b"p3"), *JSON_TYPE],
        LOOPBACK,
        b"",
    ),
    ("no key", "/v1/payments", [_payment()], JSON_TYPE, LOOPBACK, b""),
    (
        "404 account",
        "/v1/payments",
        [_payment(destination_account="acct_x")],
        [(b"idempotency-key", b"p4")],
        LOOPBACK,
        b"",
    ),
    (
        "415",
        "/v1/payments",
        [_payment()],
        [(b"idempotency-key", b"p5"), (b"content-type", b"text/plain"), (b"content-length", b"120")],
        LOOPBACK,
        b"",
    ),
    ("a NUL in the query", "/v1/payments", [_payment()], [(b"idempotency-key", b"p6")], LOOPBACK, b"a=%00"),
    (
        "413 by length",
        "/v1/payments",
        [b" " * (BODY_BYTES_MAX + 1)],
        [(b"idempotency-key", b"p7"), (b"content-length", str(BODY_BYTES_MAX + 1).encode())],
        LOOPBACK,
        b"",
    ),
    ("413 streamed", "/v1/payments", [b" " * 1000] * 5, [(b"transfer-encoding", b"chunked")], LOOPBACK, b""),
    (
        "streamed, within",
        "/v1/payments",
        [_payment()[:9], _payment()[9:]],
        [(b"idempotency-key", b"p8")],
        LOOPBACK,
        b"",
    ),
    ("off loopback", "/v1/payments", [_payment()], [(b"idempotency-key", b"p9")], ("10.1.2.3", 8000), b""),
    ("a refund", "/v1/payments/@P/refunds", [b'{"amount_minor": 100}'], [(b"idempotency-key", b"r1")], LOOPBACK, b""),
    (
        "over-refund",
        "/v1/payments/@P/refunds",
        [b'{"amount_minor": 900}'],
        [(b"idempotency-key", b"r2")],
        LOOPBACK,
        b"",
    ),
    (
        "a refund of 1.5",
        "/v1/payments/@P/refunds",
        [b'{"amount_minor": 1.5}'],
        [(b"idempotency-key", b"r3")],
        LOOPBACK,
        b"",
    ),
    ("a credit", "/v1/tenants/default/credits", [_credit("c1", 100)], [], LOOPBACK, b""),
    ("a credit of 0", "/v1/tenants/default/credits", [_credit("c2", 0)], [], LOOPBACK, b""),
    ("a cancel's 404", "/v1/payouts/po_01NOSUCH/cancel", [b""], [(b"idempotency-key", b"x1")], LOOPBACK, b""),
    ("a transfer of -1", "/v1/transfers", [b'{"amount_minor": -1}'], [(b"idempotency-key", b"t1")], LOOPBACK, b""),
    ("not a money route", "/v1/accounts", [b"{}"], [], LOOPBACK, b""),
]


async def call(
    app: FastAPI,
    path: str,
    chunks: list[bytes],
    headers: list[tuple[bytes, bytes]],
    server: tuple[str, int] = LOOPBACK,
    query: bytes = b"",
    method: str = "POST",
) -> tuple[int, list[tuple[bytes, bytes]], bytes, str | None]:
    """(status, headers, body, the error raised to the server) of one raw ASGI request."""
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1} for i, chunk in enumerate(chunks)
    ]
    pending.reverse()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": server,
    }
    raised = None
    try:
        await app(scope, receive, send)
    except Exception as error:  # what the server would see (and log)
        raised = type(error).__name__
    start = next(message for message in sent if message["type"] == "http.response.start")
    body = b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")
    return start["status"], sorted(start["headers"]), body, raised


@pytest.fixture
def apps(
    settings: Settings,
    database: Database,
    other: tuple[Settings, Database],
    sandboxes: tuple[InProcessTransport, InProcessTransport],
) -> tuple[FastAPI, FastAPI]:
    lean = create_app(dataclasses.replace(settings, body_bytes_max=BODY_BYTES_MAX), database, sandboxes[0])
    full = create_app(dataclasses.replace(other[0], body_bytes_max=BODY_BYTES_MAX), other[1], sandboxes[1])
    full.state.lean_edges = False
    return lean, full


def _line(record: logging.LogRecord) -> tuple[Any, ...]:
    fields = record.__dict__
    return tuple(fields[name] for name in ("request_id", "tenant_id", "method", "route", "status"))


def _latency_counts(app: FastAPI) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in app.state.metrics.latency.collect()
        for sample in family.samples
        if sample.name.endswith("_count")
    }


async def _exchange(
    app: FastAPI, caplog: pytest.LogCaptureFixture, cases: list[Case], auth: list[tuple[bytes, bytes]]
) -> list[Any]:
    """Every case's answer and access line, the refusals in the audit log, the latency series."""
    answers: list[Any] = []
    async with app.router.lifespan_context(app):
        account = b'{"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}'
        made = await call(app, "/v1/accounts", [account], [*JSON_TYPE, *auth])
        names = {"@A": json.loads(made[2])["id"]}
        for number, (name, path, chunks, headers, server, query) in enumerate(cases):
            for placeholder, value in names.items():
                path = path.replace(placeholder, value)
                chunks = [chunk.replace(placeholder.encode(), value.encode()) for chunk in chunks]
            caplog.clear()
            sent = [(b"x-request-id", f"r{number}".encode()), *auth, *headers]
            status, headers_sent, body, raised = await call(app, path, chunks, sent, server, query)
            if name == "a payment":
                names["@P"] = json.loads(body)["id"]
            lines = [_line(record) for record in caplog.records if record.name == "paycore.http.access"]
            answered = (status, edges.mask(repr(headers_sent)), edges.mask(body.decode()), raised)
            answers.append((name, answered, lines))
        refused = await call(app, "/v1/audit_events", [b""], auth, query=b"outcome=refused&limit=100", method="GET")
    audited = [(event["type"], event["data"]) for event in json.loads(refused[2])["data"]]
    return [*answers, edges.mask(repr(audited)), _latency_counts(app)]


def _compare(
    apps: tuple[FastAPI, FastAPI], caplog: pytest.LogCaptureFixture, auth: list[Any] | None = None
) -> list[Any]:
    caplog.set_level(logging.INFO, logger="paycore.http.access")
    lean, full = (asyncio.run(_exchange(app, caplog, CASES, (auth or [[], []])[i])) for i, app in enumerate(apps))
    for one, other in zip(lean, full, strict=True):
        assert one == other
    return lean


def test_every_request_is_answered_logged_counted_and_audited_as_the_full_stack_does(
    apps: tuple[FastAPI, FastAPI], caplog: pytest.LogCaptureFixture
) -> None:
    through_full_stack = _count_full_stack(apps[0])
    answers = _compare(apps, caplog)
    # Only what is not a thin edge's, or arrived off loopback, crossed the full stack.
    assert through_full_stack == ["/v1/accounts", "/v1/payments", "/v1/accounts", "/v1/audit_events"]
    statuses = {name: answered[0] for name, answered, _ in answers[: len(CASES)]}
    assert statuses == {
        "a payment": 201,
        "its replay": 201,
        "without a type": 201,
        "a bool amount": 400,
        "no key": 400,
        "404 account": 404,
        "415": 415,
        "a NUL in the query": 400,
        "413 by length": 413,
        "413 streamed": 413,
        "streamed, within": 201,
        "off loopback": 403,
        "a refund": 201,
        "over-refund": 422,
        "a refund of 1.5": 400,
        "a credit": 201,
        "a credit of 0": 400,
        "a cancel's 404": 404,
        "a transfer of -1": 400,
        "not a money route": 400,
    }, statuses
    assert all(len(lines) == 1 for _, _, lines in answers[: len(CASES)]), "one access line a request"
    assert "api.credits.create" in answers[-2] and "api.payments.create" in answers[-2]


def test_with_api_keys_401_and_another_tenant_come_as_they_did(
    apps: tuple[FastAPI, FastAPI], caplog: pytest.LogCaptureFixture
) -> None:
    keys = []
    for app in apps:
        database: Database = app.state.database
        made = database.transaction(lambda connection: tenants.create_tenant(connection, "acme", now_us=now_us()))
        keys.append([(b"authorization", f"Bearer {made.api_key}".encode())])
    through_full_stack = _count_full_stack(apps[0])
    answers = _compare(apps, caplog, keys)
    assert answers[0][1][0] == 201
    # Once a key exists, a money request that arrived off loopback is served in the one pass too.
    assert through_full_stack == ["/v1/accounts", "/v1/accounts", "/v1/audit_events"]
    without_key = _compare_one(apps, caplog, [(b"idempotency-key", b"k"), *JSON_TYPE])
    assert without_key[0] == 401


def _compare_one(apps: tuple[FastAPI, FastAPI], caplog: pytest.LogCaptureFixture, headers: list[Any]) -> Any:
    async def one(app: FastAPI) -> Any:
        async with app.router.lifespan_context(app):
            caplog.clear()
            answered = await call(app, "/v1/payments", [_payment()], [(b"x-request-id", b"same"), *headers])
            return answered, [_line(record) for record in caplog.records if record.name == "paycore.http.access"]

    lean, full = (asyncio.run(one(app)) for app in apps)
    assert lean == full
    return lean[0]


def test_an_unhandled_error_is_a_500_with_its_request_id_raised_to_the_server(
    apps: tuple[FastAPI, FastAPI], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_arguments: Any) -> Any:
        raise RuntimeError("a bug")

    # What both answers of a payment start from (`payment_answer` on a worker thread,
    # `payment_answer_on_loop` on SQLite's loop).
    monkeypatch.setattr(payments_router, "payment_request", broken)
    caplog.set_level(logging.INFO, logger="paycore.http.access")
    answered = _compare_one(apps, caplog, [(b"idempotency-key", b"k"), *JSON_TYPE])
    status, headers, body, raised = answered
    assert (status, raised) == (500, "RuntimeError"), answered
    assert (b"x-request-id", b"same") in headers and json.loads(body)["error"] == "internal_error"


def _count_full_stack(app: FastAPI) -> list[str]:
    """The paths of the requests `app` (as served) sent to its full middleware stack."""
    app.middleware_stack = app.build_middleware_stack()
    dispatch = app.middleware_stack
    assert isinstance(dispatch, LeanDispatch), dispatch
    seen: list[str] = []
    full = dispatch.full

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])
        await full(scope, receive, send)

    dispatch.full = counted
    return seen


class _HandsEverythingOver(Endpoint):
    """An edge that reads nothing itself: every request goes to its FastAPI route."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._hand_over(scope, receive, send)


def test_an_edge_added_to_the_routes_is_served_in_the_one_pass(
    apps: tuple[FastAPI, FastAPI], caplog: pytest.LogCaptureFixture
) -> None:
    """What the next thin edge (the processor webhook's) needs: its `routes.insert(0, ...)` only."""
    lean, full = apps
    for app in apps:
        fallback = fastapi_route(ledger_router.router, ledger_router.create_account)
        app.router.routes.insert(0, Edge(fallback, _HandsEverythingOver(fallback)))
    through_full_stack = _count_full_stack(lean)
    dispatch = lean.middleware_stack
    assert isinstance(dispatch, LeanDispatch), dispatch
    assert [edge.path for edge in dispatch.edges][:2] == ["/v1/accounts", "/v1/webhooks/processor"]
    caplog.set_level(logging.INFO, logger="paycore.http.access")

    async def made(app: FastAPI) -> Any:
        async with app.router.lifespan_context(app):
            account = b'{"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}'
            answers = []
            for body in (account, account, b'{"code": 1}'):
                caplog.clear()
                answered = await call(app, "/v1/accounts", [body], [(b"x-request-id", b"same"), *JSON_TYPE])
                status, headers, text, raised = answered
                lines = [_line(record) for record in caplog.records if record.name == "paycore.http.access"]
                answers.append((status, edges.mask(repr(headers)), edges.mask(text.decode()), raised, lines))
        return answers, _latency_counts(app)

    assert asyncio.run(made(lean)) == asyncio.run(made(full))
    assert through_full_stack == [], "served by the new edge in the one pass"
