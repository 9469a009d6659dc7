#!/usr/bin/env python3
"""Credits through the whole app in one process, without an HTTP server: the thin edge
(`http/money/credits.py`) against the FastAPI route it stands in front of, rounds alternated
(ADR 0026 decision 4, issue 39).

    .venv/bin/python bench/credits_edge_bench.py --rounds 5 --credits 2000

Each round makes a fresh SQLite database and an app (`create_app`: every middleware, the error
handlers, the writer), once as served and once with the edge's route removed, so the FastAPI
route answers; which goes first alternates. The app is called as an ASGI callable, 8 credits at
a time (`asyncio.gather`), each with a fresh key, after a warm-up of 200. Measured: this
process's CPU a credit (`time.process_time`: the event loop and SQLite's writer thread), no
uvicorn, no client. Medians over rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from typing import Any

from fastapi import FastAPI

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import credits as money_credits

PATH = "/v1/tenants/bench/credits"
CONCURRENT_MAX = 8
WARMUP_CREDITS = 200


def _scope(body: bytes) -> dict[str, Any]:
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [*headers, (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def _credit(app: FastAPI, key: str) -> None:
    line = {"desc": "bench", "amount_minor": 1, "currency": "USD"}
    body = json.dumps({"idempotency_key": key, "lines": [line]}).encode()
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # the client stays: never a disconnect
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(_scope(body), receive, send)
    assert statuses == [201], statuses


async def _drive(app: FastAPI, credits: int, tag: str) -> float:
    """CPU µs a credit."""
    started_s = time.process_time()
    for start in range(0, credits, CONCURRENT_MAX):
        await asyncio.gather(*(_credit(app, f"{tag}-{i}") for i in range(start, min(credits, start + CONCURRENT_MAX))))
    return (time.process_time() - started_s) / credits * 1e6


async def _round(label: str, number: int, credits: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        settings = Settings(database_url=f"sqlite:///{directory}/bench.db")
        database = Database(settings)
        migrate.upgrade(database)
        app = create_app(settings, database)
        if label == "route":
            app.router.routes.remove(money_credits.ROUTE)
        try:
            async with app.router.lifespan_context(app):
                await _drive(app, WARMUP_CREDITS, f"warm{number}")
                return await _drive(app, credits, f"r{number}")
        finally:
            database.dispose()


async def run(rounds: int, credits: int) -> dict[str, list[float]]:
    measured: dict[str, list[float]] = {"edge": [], "route": []}
    for number in range(rounds):
        for label in ("edge", "route") if number % 2 == 0 else ("route", "edge"):
            measured[label].append(await _round(label, number, credits))
            print(f"round {number} {label}: {measured[label][-1]:.0f} µs CPU a credit", flush=True)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--credits", type=int, default=2000)
    args = parser.parse_args()
    measured = asyncio.run(run(args.rounds, args.credits))
    edge, route = statistics.median(measured["edge"]), statistics.median(measured["route"])
    print(f"\nSQLite, in process, {args.rounds} rounds of {args.credits} credits")
    print("| answered by | CPU µs a credit (median) | each round |\n|---|---|---|")
    for label, median in (("FastAPI route", route), ("thin edge", edge)):
        rounds = ", ".join(f"{value:.0f}" for value in measured["edge" if label == "thin edge" else "route"])
        print(f"| {label} | {median:.0f} | {rounds} |")
    print(f"| edge / route | {edge / route:.2f}x | |")


if __name__ == "__main__":
    main()
