#!/usr/bin/env python3
"""Payments through the whole app in one process, without an HTTP server: the thin edge
(`http/money/payments.py`) in the one pass of `http/lean.py` as served, the same edge behind the
full middleware stack (`app.state.lean_edges = False`), and the FastAPI route it stands in front
of, rounds rotated (ADR 0026 decision 4, issue 39). Built as `credits_edge_bench.py`.

    .venv/bin/python bench/payments_edge_bench.py --rounds 5 --payments 1000 [--processor sandbox]

Each round makes a fresh SQLite database and an app (`create_app`: every middleware, the error
handlers) three times: as served, without the one pass, and with the edge's route removed too;
which goes first rotates.
A merchant account is made through the API, then the app is called as an ASGI callable, 8
payments of 1 minor unit at a time (`asyncio.gather`), each with a fresh Idempotency-Key, after
a warm-up of 200. The processor is `instant` (an adapter that answers every charge succeeded at
once, from the event loop as the HTTP transport does, so the figure is the API's own work) or
`sandbox` (the sandbox in this process, its own SQLite file; its work is counted too).
Measured: this process's CPU a payment (`time.process_time`: the event loop and the worker
threads), no uvicorn, no client. Medians over rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import payments as money_payments
from paycore.processor.port import ChargeRequest, ChargeResult, Processor, ProcessorUnreachable
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox

CONCURRENT_MAX = 8
# As served (the thin edge in the one pass of http/lean.py); the edge behind every middleware;
# the FastAPI route behind every middleware.
LABELS = ("edge", "edge, full stack", "route")
NAMES = {
    "edge": "thin edge, one pass (as served)",
    "edge, full stack": "thin edge behind the full middleware stack",
    "route": "FastAPI route",
}
WARMUP_PAYMENTS = 200


class Instant:
    """A processor that answers every charge succeeded at once (nothing else is called here),
    from the event loop as the HTTP transport to a plain-HTTP processor does
    (`port.loop_caller`: a payment on SQLite then needs no worker thread, as served)."""

    calls_on_loop = True

    def charge(self, request: ChargeRequest) -> ChargeResult:
        return ChargeResult(
            request.request_id, "succeeded", f"ch_{request.request_id}", request.amount_minor, request.currency
        )

    async def charge_on_loop(self, request: ChargeRequest) -> ChargeResult:
        return self.charge(request)

    def get_charge(self, request_id: str) -> ChargeResult | None:
        return None

    def __getattr__(self, name: str) -> Any:
        raise ProcessorUnreachable(f"bench: {name} is not offered")


async def _post(app: FastAPI, path: str, body: Any, key: str | None = None) -> tuple[int, Any]:
    raw = json.dumps(body).encode()
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    headers += [(b"content-length", str(len(raw)).encode())]
    if key is not None:
        headers.append((b"idempotency-key", key.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    pending = [{"type": "http.request", "body": raw, "more_body": False}]
    statuses: list[int] = []
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # the client stays: never a disconnect
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return statuses[0], json.loads(b"".join(chunks))


async def _drive(app: FastAPI, account_id: str, payments: int, tag: str) -> float:
    """CPU µs a payment."""
    body = {
        "amount_minor": 1,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": account_id,
    }

    async def one(index: int) -> None:
        status, answer = await _post(app, "/v1/payments", body, key=f"{tag}-{index}")
        assert status == 201, answer

    started_s = time.process_time()
    for start in range(0, payments, CONCURRENT_MAX):
        await asyncio.gather(*(one(i) for i in range(start, min(payments, start + CONCURRENT_MAX))))
    return (time.process_time() - started_s) / payments * 1e6


def _processor(kind: str, directory: str) -> Iterator[Processor]:
    if kind == "instant":
        yield Instant()  # type: ignore[misc]
        return
    sandbox = Sandbox.open(f"sqlite:///{directory}/sandbox.db")
    try:
        yield InProcessTransport(sandbox, timeout_ms=5_000)
    finally:
        sandbox.close()


async def _round(label: str, number: int, payments: int, kind: str) -> float:
    with tempfile.TemporaryDirectory() as directory:
        settings = Settings(database_url=f"sqlite:///{directory}/bench.db")
        database = Database(settings)
        migrate.upgrade(database)
        processors = _processor(kind, directory)
        app = create_app(settings, database, next(processors))
        if label == "route":
            app.router.routes.remove(money_payments.ROUTE)
        if label != "edge":
            app.state.lean_edges = False  # through every middleware, as before http/lean.py
        try:
            async with app.router.lifespan_context(app):
                account = {"code": "merchant.main", "currency": "USD", "normal_balance": "credit"}
                status, answer = await _post(app, "/v1/accounts", account)
                assert status == 201, answer
                await _drive(app, answer["id"], WARMUP_PAYMENTS, f"warm{number}")
                return await _drive(app, answer["id"], payments, f"r{number}")
        finally:
            processors.close()
            database.dispose()


async def run(rounds: int, payments: int, kind: str) -> dict[str, list[float]]:
    measured: dict[str, list[float]] = {label: [] for label in LABELS}
    for number in range(rounds):
        for label in LABELS[number % 3 :] + LABELS[: number % 3]:  # each goes first in turn
            measured[label].append(await _round(label, number, payments, kind))
            print(f"round {number} {label}: {measured[label][-1]:.0f} µs CPU a payment", flush=True)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--payments", type=int, default=1000)
    parser.add_argument("--processor", choices=("instant", "sandbox"), default="instant")
    args = parser.parse_args()
    measured = asyncio.run(run(args.rounds, args.payments, args.processor))
    medians = {label: statistics.median(measured[label]) for label in LABELS}
    print(f"\nSQLite, in process, {args.processor} processor, {args.rounds} rounds of {args.payments} payments")
    print("| answered by | CPU µs a payment (median) | each round |\n|---|---|---|")
    for label in ("route", "edge, full stack", "edge"):
        rounds = ", ".join(f"{value:.0f}" for value in measured[label])
        print(f"| {NAMES[label]} | {medians[label]:.0f} | {rounds} |")
    print(f"| edge / route | {medians['edge'] / medians['route']:.2f}x | |")
    print(f"| edge / edge behind the full stack | {medians['edge'] / medians['edge, full stack']:.2f}x | |")


if __name__ == "__main__":
    main()
