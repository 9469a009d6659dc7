"""Fixtures for the sandbox processor: a fresh sandbox per test (its own SQLite file, or
the test's PostgreSQL database for the tests that run on both backends), a recording
webhook sink, and the provider port through either transport (`inprocess`, or `http`
against a real uvicorn server of the sandbox app on a free port)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from paycore.http.server import Server
from paycore.kit import clock
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import Processor
from paycore_sandbox import Sandbox, SandboxSettings
from paycore_sandbox.http import create_app
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.models import charges, refunds, webhooks
from tests.support import databases

SECRET = "whsec_test_secret"
TIMEOUT_MS = 5_000  # the transports' bound: generous, a loaded machine fsyncs slowly (see Harness.with_timeout)
HOLD_MS = 50  # how long the HTTP server sits on a dropped request or answer
SETTINGS = SandboxSettings(hold_ms=HOLD_MS, settle_late_ms=1_000, webhook_attempts_max=4)
HOUR_US = 3_600 * 1_000_000
StartServer = Callable[[Sandbox, "RecordingSink"], str]


@dataclass
class RecordingSink:
    """A webhook receiver in memory: records what it got, answers `status`."""

    status: int = 200
    received: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: bytes, headers: dict[str, str]) -> int:
        with self.lock:
            self.received.append((body, headers))
        return self.status

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(body) for body, _ in self.received]


@dataclass
class Harness:
    name: str
    processor: Processor
    sandbox: Sandbox
    sink: RecordingSink
    base_url: str | None = None

    def with_timeout(self, timeout_ms: int) -> Processor:
        """The same transport to the same sandbox, with another timeout."""
        if self.base_url is None:
            return InProcessTransport(self.sandbox, timeout_ms=timeout_ms)
        return HttpTransport(self.base_url, timeout_ms=timeout_ms)

    def later_us(self) -> int:
        """A moment after every settle_late and backoff a test sets up."""
        return clock.now_us() + HOUR_US


def count(sandbox: Sandbox, table_name: str) -> int:
    table = {"charges": charges, "refunds": refunds, "webhooks": webhooks}[table_name]
    with sandbox.database.read() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    opened = Sandbox.open(f"sqlite:///{tmp_path / 'sandbox.db'}", webhook_secret=SECRET, settings=SETTINGS)
    yield opened
    opened.close()


@pytest.fixture
def sandbox_on_backend(database_url: str) -> Iterator[Sandbox]:
    """A sandbox on SQLite and on PostgreSQL (its tables beside paycore's, in the test's database)."""
    opened = Sandbox.open(database_url, webhook_secret=SECRET, settings=SETTINGS)
    yield opened
    opened.close()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


class SwappableApp:
    """An ASGI app that forwards to the current test's sandbox app, so that one uvicorn server
    serves the whole session (starting and stopping one per test costs ~0.3 s)."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.app is not None, "no sandbox app is being served"
        await self.app(scope, receive, send)


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[tuple[SwappableApp, str]]:
    swappable = SwappableApp()
    server = Server(swappable, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="sandbox-http")
    thread.start()
    yield swappable, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.fixture
def serve_sandbox(sandbox_server: tuple[SwappableApp, str]) -> Iterator[StartServer]:
    """serve(sandbox, sink) -> the base url of a real HTTP server of that sandbox's app."""
    swappable, url = sandbox_server

    def serve(sandbox: Sandbox, sink: RecordingSink) -> str:
        swappable.app = create_app(sandbox, sink)
        return url

    yield serve
    swappable.app = None


@pytest.fixture(params=["inprocess", "http"])
def harness(
    request: pytest.FixtureRequest, sandbox: Sandbox, sink: RecordingSink, serve_sandbox: StartServer
) -> Harness:
    if request.param == "inprocess":
        return Harness("inprocess", InProcessTransport(sandbox, timeout_ms=TIMEOUT_MS), sandbox, sink)
    base_url = serve_sandbox(sandbox, sink)
    return Harness("http", HttpTransport(base_url, timeout_ms=TIMEOUT_MS), sandbox, sink, base_url)


@pytest.fixture(params=["inprocess", "http", pytest.param("postgres", marks=pytest.mark.postgres)])
def harness_on_backends(
    request: pytest.FixtureRequest,
    sandbox: Sandbox,
    sink: RecordingSink,
    serve_sandbox: StartServer,
    sqlite_databases: databases.SqliteDatabases,
) -> Iterator[Harness]:
    """`harness`'s two transports to a sandbox on SQLite, and the in-process one to a sandbox on
    PostgreSQL (its tables in a fresh database of the test's)."""
    if request.param == "inprocess":
        yield Harness("inprocess", InProcessTransport(sandbox, timeout_ms=TIMEOUT_MS), sandbox, sink)
        return
    if request.param == "http":
        base_url = serve_sandbox(sandbox, sink)
        yield Harness("http", HttpTransport(base_url, timeout_ms=TIMEOUT_MS), sandbox, sink, base_url)
        return
    with databases.fresh_url("postgres", sqlite_databases, request.getfixturevalue("postgres_databases")) as url:
        opened = Sandbox.open(url, webhook_secret=SECRET, settings=SETTINGS)
        try:
            yield Harness("postgres", InProcessTransport(opened, timeout_ms=TIMEOUT_MS), opened, sink)
        finally:
            opened.close()
