#!/usr/bin/env python3
"""What each ASGI layer costs a money request, and the one pass of `http/lean.py` against them
(issue 39 point 2, ADR 0026 decision 4: the budget on paper first).

    .venv/bin/python bench/edge_layers_bench.py [--rounds 5] [--requests 20000]

The app as `create_app` builds it (SQLite, every middleware, the error handlers), with the
payment edge's endpoint answering at once (201, a fixed body: no body read, no write, no thread
hop), so that what is measured is the layers alone. Each variant is called in process as an
ASGI callable, 8 requests at a time, with the same `POST /v1/payments`:

- `endpoint alone`: the edge's endpoint called directly (the floor);
- `one pass`: as served (`LeanDispatch`);
- `full stack`: `lean_edges` off, every layer; and `full stack without X`: that one layer taken
  out of the app's middleware, so that `full - without X` is what X costs.

Measured: this process's CPU a request (`time.process_time`), medians over rounds, the
variants' order rotated each round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.exposure import ExposureGuard
from paycore.http.middleware import BodyLimit
from paycore.http.money import payments as money_payments
from paycore.http.refusals import RefusalAudit

CONCURRENT_MAX = 8
BODY = b'{"amount_minor":1,"currency":"USD","source":{"type":"card","token":"tok_ok"},"destination_account":"a"}'
ANSWER = b'{"id":"pay_x"}'


async def _instant(scope: Scope, receive: Receive, send: Send) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


def _scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/payments",
        "raw_path": b"/v1/payments",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
            (b"idempotency-key", b"k"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def _one(app: ASGIApp) -> None:
    pending = [{"type": "http.request", "body": BODY, "more_body": False}]
    statuses: list[int] = []

    async def receive() -> Any:
        return pending.pop()

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(_scope(), receive, send)
    assert statuses == [201], statuses


async def _measure(app: ASGIApp, requests: int) -> float:
    """CPU µs a request."""
    started_s = time.process_time()
    for _ in range(0, requests, CONCURRENT_MAX):
        await asyncio.gather(*(_one(app) for _ in range(CONCURRENT_MAX)))
    return (time.process_time() - started_s) / requests * 1e6


def _app(settings: Settings, database: Database, *, lean: bool, without: type | None = None) -> FastAPI:
    app = create_app(settings, database)
    app.state.lean_edges = lean
    if without is not None:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not without]
    return app


def _variants(settings: Settings, database: Database) -> dict[str, Callable[[], ASGIApp]]:
    route = money_payments.ROUTE

    def alone() -> ASGIApp:
        async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            scope["route"] = route
            await _instant(scope, receive, send)

        return endpoint

    return {
        "endpoint alone": alone,
        "one pass (as served)": lambda: _app(settings, database, lean=True),
        "full stack": lambda: _app(settings, database, lean=False),
        "full stack without ExposureGuard": lambda: _app(settings, database, lean=False, without=ExposureGuard),
        "full stack without BodyLimit": lambda: _app(settings, database, lean=False, without=BodyLimit),
        "full stack without RefusalAudit": lambda: _app(settings, database, lean=False, without=RefusalAudit),
    }


async def run(rounds: int, requests: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as directory:
        settings = Settings(database_url=f"sqlite:///{directory}/bench.db")
        database = Database(settings)
        migrate.upgrade(database)
        original = money_payments.ROUTE.app
        money_payments.ROUTE.app = _instant  # the edge answers at once: the layers alone
        try:
            variants = _variants(settings, database)
            apps = {label: make() for label, make in variants.items()}
            labels = list(apps)
            measured: dict[str, list[float]] = {label: [] for label in labels}
            for number in range(rounds):
                turn = number % len(labels)
                for label in labels[turn:] + labels[:turn]:
                    await _measure(apps[label], 800)  # warm
                    measured[label].append(await _measure(apps[label], requests))
            return measured
        finally:
            money_payments.ROUTE.app = original
            database.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    measured = asyncio.run(run(args.rounds, args.requests))
    medians = {label: statistics.median(values) for label, values in measured.items()}
    floor, full = medians["endpoint alone"], medians["full stack"]
    print(f"\n{args.rounds} rounds of {args.requests} POST /v1/payments, the edge answering at once")
    print("| variant | CPU µs a request (median) | above the endpoint alone | each round |\n|---|---|---|---|")
    for label, median in medians.items():
        rounds = ", ".join(f"{value:.1f}" for value in measured[label])
        print(f"| {label} | {median:.1f} | {median - floor:.1f} | {rounds} |")
    for layer in ("ExposureGuard", "BodyLimit", "RefusalAudit"):
        print(f"{layer}: {full - medians[f'full stack without {layer}']:.1f} µs")


if __name__ == "__main__":
    main()
