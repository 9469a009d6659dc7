#!/usr/bin/env python3
"""Ledger transfers through the whole app in one process, without an HTTP server: the thin edge
(`http/money/transfers.py`) against the FastAPI route it stands in front of, rounds alternated
(ADR 0026 decision 4, issue 39). Built as `credits_edge_bench.py`.

    .venv/bin/python bench/transfers_edge_bench.py --rounds 5 --transfers 2000

Each round makes a fresh SQLite database and an app (`create_app`: every middleware, the error
handlers), once as served and once with the edge's route removed; which goes first alternates.
Two USD accounts are made through the API, then the app is called as an ASGI callable, 8
transfers of 1 minor unit at a time (`asyncio.gather`), each with a fresh Idempotency-Key, after
a warm-up of 200. Measured: this process's CPU a transfer (`time.process_time`: the event loop
and the worker threads that write), no uvicorn, no client. Medians over rounds, and their ratio.
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
from paycore.http.money import transfers as money_transfers

CONCURRENT_MAX = 8
WARMUP_TRANSFERS = 200


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


async def _drive(app: FastAPI, accounts: tuple[str, str], transfers: int, tag: str) -> float:
    """CPU µs a transfer."""
    body = {"debit_account_id": accounts[0], "credit_account_id": accounts[1], "amount_minor": 1, "currency": "USD"}

    async def one(index: int) -> None:
        status, answer = await _post(app, "/v1/transfers", body, key=f"{tag}-{index}")
        assert status == 201, answer

    started_s = time.process_time()
    for start in range(0, transfers, CONCURRENT_MAX):
        await asyncio.gather(*(one(i) for i in range(start, min(transfers, start + CONCURRENT_MAX))))
    return (time.process_time() - started_s) / transfers * 1e6


async def _round(label: str, number: int, transfers: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        settings = Settings(database_url=f"sqlite:///{directory}/bench.db")
        database = Database(settings)
        migrate.upgrade(database)
        app = create_app(settings, database)
        if label == "route":
            app.router.routes.remove(money_transfers.ROUTE)
        try:
            async with app.router.lifespan_context(app):
                made = []
                for code, normal_balance in (("cash", "debit"), ("revenue", "credit")):
                    account = {"code": code, "currency": "USD", "normal_balance": normal_balance}
                    status, answer = await _post(app, "/v1/accounts", account)
                    assert status == 201, answer
                    made.append(answer["id"])
                accounts = (made[0], made[1])
                await _drive(app, accounts, WARMUP_TRANSFERS, f"warm{number}")
                return await _drive(app, accounts, transfers, f"r{number}")
        finally:
            database.dispose()


async def run(rounds: int, transfers: int) -> dict[str, list[float]]:
    measured: dict[str, list[float]] = {"edge": [], "route": []}
    for number in range(rounds):
        for label in ("edge", "route") if number % 2 == 0 else ("route", "edge"):
            measured[label].append(await _round(label, number, transfers))
            print(f"round {number} {label}: {measured[label][-1]:.0f} µs CPU a transfer", flush=True)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transfers", type=int, default=2000)
    args = parser.parse_args()
    measured = asyncio.run(run(args.rounds, args.transfers))
    edge, route = statistics.median(measured["edge"]), statistics.median(measured["route"])
    print(f"\nSQLite, in process, {args.rounds} rounds of {args.transfers} transfers")
    print("| answered by | CPU µs a transfer (median) | each round |\n|---|---|---|")
    for label, median in (("FastAPI route", route), ("thin edge", edge)):
        rounds = ", ".join(f"{value:.0f}" for value in measured["edge" if label == "thin edge" else "route"])
        print(f"| {label} | {median:.0f} | {rounds} |")
    print(f"| edge / route | {edge / route:.2f}x | |")


if __name__ == "__main__":
    main()
