"""Fixtures for end-to-end tests: real servers on real sockets, on the test's fresh database
(`database_url`, from tests/conftest.py: SQLite file or PostgreSQL, migrated)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import STOP_TIMEOUT_S, ServerProcess, StartServers, server_env, start_all
from tests.support import secrets_keys


@pytest.fixture
def serve_processes(tmp_path: Path) -> Iterator[StartServers]:
    """start(count, database_url, **env) -> `count` running `paycore serve` OS processes on
    free ports, ready (their /healthz answered). All are stopped at teardown, and their logs
    are printed if the test failed."""
    started: list[ServerProcess] = []

    def start(count: int, database_url: str, **env: str) -> list[ServerProcess]:
        servers = [
            ServerProcess(server_env(database_url, **env), tmp_path / f"serve-{len(started) + index}.log")
            for index in range(count)
        ]
        started.extend(servers)
        start_all(servers)
        return servers

    yield start
    for server in started:
        server.stop()
    for server in started:
        print(f"--- {server.log_path.name} (port {server.port}):\n{server.log()}")


@pytest.fixture
def make_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., int]]:
    """start(database_url, **env) -> the port of `app.make_server(port=0)` (the SPEC §5 entry
    point) serving in a thread of this process; shut down at teardown."""
    servers: list[tuple[Any, threading.Thread]] = []

    def start(database_url: str, **env: str) -> int:
        import app  # the repository root's app.py

        monkeypatch.setenv("PAYCORE_DATABASE_URL", database_url)
        # Else local mode on PostgreSQL keeps its generated key in the working directory: the
        # repository's root (ADR 0018). The shared contract tests do exercise that.
        monkeypatch.setenv("PAYCORE_SECRETS_KEY", secrets_keys.TEXT)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        server = app.make_server(host="127.0.0.1", port=0)
        thread = threading.Thread(target=server.serve_forever, daemon=True, name="make_server")
        thread.start()
        servers.append((server, thread))
        return int(server.server_address[1])

    yield start
    for server, thread in servers:
        server.shutdown()
        thread.join(STOP_TIMEOUT_S)
        assert not thread.is_alive(), "make_server's serve_forever did not return after shutdown()"
        server.server_close()  # shutdown() released its database already (test_make_server_closes.py)
