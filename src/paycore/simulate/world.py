"""A throwaway world for one scenario: paycore on its own SQLite file, the sandbox processor
(in this process, or as a separate `paycore processor serve` process for `--transport http`),
the paycore API driven in-process, the workers run on demand, and a timeline of what happened.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.server import Server
from paycore.kit import clock
from paycore.processor.port import Processor
from paycore.reconciliation import rounds as reconciliation_rounds
from paycore.reconciliation import service as reconciliation
from paycore.workers.jobs import JOBS, WorkerContext
from paycore_sandbox.service import Sandbox

START_TIMEOUT_S = 30
TIMEOUT_MS = 1_000
DAY_MS = 86_400_000
WEBHOOK_LOOKAHEAD_US = 10**9  # in-process: webhook deliveries due within this are sent now
PROCESSOR_PATHS = {"payment": "/v1/charges/", "refund": "/v1/refunds/", "payout": "/v1/payouts/"}


@dataclass
class Line:
    at_ms: int
    actor: str
    text: str


@dataclass
class World:
    transport: str
    workdir: Path
    database: Database
    settings: Settings
    processor: Processor
    client: TestClient
    sandbox: Sandbox | None  # in-process only
    sandbox_url: str | None  # http only
    sandbox_process: subprocess.Popen[bytes] | None
    server: Server | None = None
    worker: WorkerContext | None = None  # one worker for the world's life, as `paycore worker`
    webhooks_up: bool = True
    started: float = field(default_factory=time.monotonic)
    first_day: dt.date = field(default_factory=lambda: clock.utc_day(clock.now_us()))
    lines: list[Line] = field(default_factory=list)

    # --- the timeline --------------------------------------------------------------

    def say(self, actor: str, text: str) -> None:
        self.lines.append(Line(int((time.monotonic() - self.started) * 1000), actor, text))

    # --- paycore, as a client sees it --------------------------------------------------

    def post(self, path: str, body: dict[str, Any], key: str | None = None) -> tuple[int, dict[str, Any]]:
        headers = {"Idempotency-Key": key} if key else {}
        response = self.client.post(path, json=body, headers=headers)
        replayed = " (replayed)" if response.headers.get("Idempotent-Replayed") else ""
        payload = response.json()
        summary = payload.get("status") or payload.get("error") or payload.get("id")
        self.say("client", f"POST {path} -> {response.status_code} {summary}{replayed}")
        return response.status_code, payload

    def get(self, path: str) -> dict[str, Any]:
        response = self.client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return dict(response.json())

    def merchant(self) -> str:
        status, body = self.post(
            "/v1/accounts", {"code": "merchant", "currency": "USD", "normal_balance": "credit"}, key="merchant"
        )
        assert status in (200, 201), body
        return str(body["id"])

    def run_workers(self, rounds: int = 1) -> None:
        """Run every worker job `rounds` times, as `paycore worker` would."""
        if self.worker is None:
            self.worker = WorkerContext.create(self.database, self.settings, self.processor)
        context = self.worker
        for _ in range(rounds):
            time.sleep(0.005)  # past the tiny backoff of the simulation's settings
            for name, job, _batch in JOBS:
                done = job(context)
                if done:
                    self.say("worker", f"{name}: {done}")

    # --- the processor ---------------------------------------------------------------

    def faults(self, *rules: dict[str, Any], seed: int = 1, settle_late_ms: int = 0) -> None:
        plan = {"seed": seed, "hold_ms": 0, "settle_late_ms": settle_late_ms, "rules": list(rules)}
        if self.sandbox is not None:
            self.sandbox.set_fault_plan(plan)
        else:
            _http(self.sandbox_url, "PUT", "/v1/sandbox/faults", plan)
        self.say("driver", "processor fault plan: " + (", ".join(_describe(rule) for rule in rules) or "none"))

    def at_processor(self, kind: str, request_id: str) -> dict[str, Any] | None:
        """The processor's own record of a payment (its charge), refund or payout, by request id."""
        if self.sandbox is not None:
            ask = {"payment": self.sandbox.get_charge, "refund": self.sandbox.get_refund}.get(kind)
            found = (ask or self.sandbox.get_payout)(request_id)
            return None if found is None else found.__dict__
        status, body = _http(self.sandbox_url, "GET", PROCESSOR_PATHS[kind] + request_id)
        if status == 200:
            return dict(body)
        return None if status == 404 else {"status": f"not said (HTTP {status}: {body.get('error')})"}

    def settle_and_deliver(self) -> None:
        """The processor's background work: finish what is due, deliver webhooks to paycore.

        In-process, the sandbox settles at the real time: its settlement report dates a payout's
        line by the moment the bank settled it, and a moment ahead of the clock would put that
        line in a day paycore's clock has not reached (the last minutes of a UTC day). Only the
        webhook deliveries look ahead: a retry after paycore's endpoint was down is due at once."""
        now_us = clock.now_us()
        later_us = now_us + WEBHOOK_LOOKAHEAD_US

        def sink(body: bytes, headers: dict[str, str]) -> int:
            if not self.webhooks_up:
                return 503
            return self.client.post("/v1/webhooks/processor", content=body, headers=headers).status_code

        if self.sandbox is not None:
            settled = self.sandbox.settle_due(now_us=now_us)
            delivered = self.sandbox.deliver_due(sink, later_us)
            if settled or delivered:
                self.say("processor", f"settled {settled} late item(s), delivered {delivered} webhook(s)")
        else:
            _http(self.sandbox_url, "POST", "/v1/sandbox/webhooks/deliver", {})

    def webhooks(self, *, up: bool) -> None:
        """Take paycore's webhook endpoint down (503: the processor retries) or back up."""
        self.webhooks_up = up
        self.say("driver", f"paycore's webhook endpoint {'up' if up else 'down (503)'}")

    def reconcile(self) -> list[reconciliation.Summary]:
        """Fetch the processor's settlement report of every day of the world, from the day it was
        built to today, and reconcile each, as `paycore reconcile --day` does (the worker's
        scheduled job only takes days long closed). A world that lives across midnight has lines
        in two days' reports: a payout sent at 23:59:59 settles in the next day's."""
        summaries = []
        for day in self.days():
            summary = reconciliation_rounds.reconcile_from_processor(
                self.database, self.processor, day, grace_ms=self.settings.reconcile_grace_ms
            )
            breaks = ", ".join(f"{kind} {count}" for kind, count in sorted(summary.breaks.items())) or "none"
            self.say(
                "paycore",
                f"settlement report of {day}: {summary.lines_read} line(s), {summary.matched} matched, "
                f"{summary.resolved} resolved, new breaks: {breaks}",
            )
            summaries.append(summary)
        return summaries

    def days(self) -> list[str]:
        """The UTC days of the world so far, from the one it was built on to today's."""
        last = clock.utc_day(clock.now_us())
        return [(self.first_day + dt.timedelta(days=n)).isoformat() for n in range((last - self.first_day).days + 1)]

    def wait_for(self, done: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
        """Poll until `done()` (over HTTP the processor's webhooks arrive on their own schedule)."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() >= deadline:
                raise AssertionError(f"not within {timeout_s} s: {what}")
            self.settle_and_deliver()
            time.sleep(0.05)

    def close(self) -> None:
        self.client.close()
        self.database.dispose()
        if self.sandbox is not None:
            self.sandbox.close()
        if self.sandbox_process is not None:
            self.sandbox_process.terminate()
            self.sandbox_process.wait(timeout=20)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def build(transport: str) -> World:
    workdir = Path(tempfile.mkdtemp(prefix="paycore-simulate-"))
    settings = replace(
        Settings(database_url=f"sqlite:///{workdir / 'paycore.db'}"),
        processor_timeout_ms=TIMEOUT_MS,
        resolver_backoff_ms=1,
        resolver_backoff_max_ms=2,
        resolver_attempts_max=3,
        # The scenarios reconcile the world's days themselves (`World.reconcile`), and the
        # worker's scheduled job, which takes only days closed this long, finds none due.
        reconcile_delay_ms=DAY_MS,
        reconcile_lookback_days=1,
    )
    database = Database(settings)
    migrate.upgrade_new(database)  # a new file in a new directory: no other process knows it
    processor: Processor
    if transport == "inprocess":
        from paycore_sandbox.inprocess import InProcessTransport

        sandbox = Sandbox.open(f"sqlite:///{workdir / 'sandbox.db'}", webhook_secret=settings.processor_webhook_secret)
        processor = InProcessTransport(sandbox, timeout_ms=TIMEOUT_MS)
        client = TestClient(create_app(settings, database, processor))
        return World(transport, workdir, database, settings, processor, client, sandbox, None, None)
    from paycore.processor.http_transport import HttpTransport

    sandbox_port = _free_port()
    processor = HttpTransport(f"http://127.0.0.1:{sandbox_port}", timeout_ms=TIMEOUT_MS)
    app = create_app(settings, database, processor)
    holder: list[World] = []
    gated = _WebhookGate(app, lambda: not holder or holder[0].webhooks_up)
    server = Server(gated, "127.0.0.1", 0)  # paycore on a real port: the sandbox's webhooks come here
    threading.Thread(target=server.serve_forever, daemon=True, name="simulate-paycore").start()
    webhook_url = f"http://127.0.0.1:{server.server_address[1]}/v1/webhooks/processor"
    sandbox_url, process = _start_sandbox(workdir, sandbox_port, webhook_url, settings.processor_webhook_secret)
    client = TestClient(app)
    world = World(transport, workdir, database, settings, processor, client, None, sandbox_url, process)
    world.server = server
    holder.append(world)
    return world


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_sandbox(workdir: Path, port: int, webhook_url: str, secret: str) -> tuple[str, subprocess.Popen[bytes]]:
    command = [sys.executable, "-c", "from paycore.cli.main import main; main()", "processor", "serve"]
    command += ["--port", str(port), "--database-url", f"sqlite:///{workdir / 'sandbox.db'}"]
    command += ["--webhook-url", webhook_url]
    # Its own sandbox, on loopback: the fault plan this run sets needs no admin token, whatever
    # this environment holds for another sandbox.
    env = {**os.environ, "PAYCORE_PROCESSOR_WEBHOOK_SECRET": secret}
    env.pop("PAYCORE_SANDBOX_ADMIN_TOKEN", None)
    with (workdir / "sandbox.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if _http(url, "GET", "/healthz")[0] == 200:
                return url, process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the sandbox processor did not start; see {workdir / 'sandbox.log'}")


def _http(base_url: str | None, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    assert base_url is not None
    host, _, port = base_url.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None
    finally:
        connection.close()


def _describe(rule: dict[str, Any]) -> str:
    when = f"next {rule['next_n']}" if "next_n" in rule else f"{rule.get('percent')}%"
    ops = "/".join(rule.get("ops", ["charge", "refund"]))
    extra = f" {rule['delay_ms']} ms" if "delay_ms" in rule else ""
    return f"{rule['fault']}{extra} on {when} {ops}"


class _WebhookGate:
    """ASGI wrapper of paycore for the processor's side: 503 while the endpoint is "down"."""

    def __init__(self, app: Any, is_up: Callable[[], bool]) -> None:
        self.app = app
        self.is_up = is_up

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self.is_up():
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"down"})
            return
        await self.app(scope, receive, send)
