"""Issue 18 point 1 (SPEC §3.2, ADR 0013): every entry point refuses to expose local mode or the
public default webhook secret off loopback. Here: the rule, `app.make_server` (the `Server`
class) and `app.app` under a separately run ASGI server (refused per request, by the address
the request arrived on); `paycore serve` and `serve --dev` are in test_bind_safety_cli.py.
Addresses: 0.0.0.0, ::, this machine's own LAN address and its hostname. Traffic goes only to
this machine's own addresses.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from paycore.config import DEV_WEBHOOK_SECRET, Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.exposure import UnsafeBind, check_bind, is_loopback
from paycore.http.server import Server
from tests.support.exposure import HOSTNAME, LAN, REAL_SECRET, UNSAFE_HOSTS, add_key, get, needs_lan, post_webhook

PAYCORE = Path(sys.executable).with_name("paycore")
CLI_TIMEOUT_S = 60
START_TIMEOUT_S = 30


# ---------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.10", "10.0.0.1", "fd00::2", "example.com", HOSTNAME])
def test_everything_else_is_not_loopback(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize("host", UNSAFE_HOSTS)
def test_check_bind_refuses_local_mode_and_the_default_secret(host: str, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(UnsafeBind) as local:
        check_bind(host, local_mode=True, webhook_secret=REAL_SECRET)
    assert local.value.reason == "local_mode"
    with pytest.raises(UnsafeBind) as secret:
        check_bind(host, local_mode=False, webhook_secret=DEV_WEBHOOK_SECRET)
    assert secret.value.reason == "default_webhook_secret"
    check_bind(host, local_mode=False, webhook_secret=REAL_SECRET)
    check_bind("127.0.0.1", local_mode=True, webhook_secret=DEV_WEBHOOK_SECRET)
    refusals = [record for record in caplog.records if getattr(record, "event", None) == "start_refused"]
    assert [getattr(record, "reason", None) for record in refusals] == ["local_mode", "default_webhook_secret"]
    assert all(record.levelname == "ERROR" and getattr(record, "host", None) == host for record in refusals)


# ---------------------------------------------------------------------------- app.make_server


@pytest.mark.parametrize("host", UNSAFE_HOSTS)
def test_make_server_refuses_local_mode_off_loopback(
    host: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app

    monkeypatch.setenv("PAYCORE_DATABASE_URL", database_url)
    monkeypatch.setenv("PAYCORE_PROCESSOR_WEBHOOK_SECRET", REAL_SECRET)
    with pytest.raises(UnsafeBind, match="no API key exists yet"):
        app.make_server(host=host, port=0)


@pytest.mark.parametrize("host", UNSAFE_HOSTS)
def test_make_server_refuses_the_default_secret_off_loopback(
    host: str, database_url: str, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app

    migrate.upgrade(database)
    add_key(database)
    monkeypatch.setenv("PAYCORE_DATABASE_URL", database_url)
    monkeypatch.delenv("PAYCORE_PROCESSOR_WEBHOOK_SECRET", raising=False)
    with pytest.raises(UnsafeBind, match="PAYCORE_PROCESSOR_WEBHOOK_SECRET"):
        app.make_server(host=host, port=0)


def test_make_server_nothing_is_bound_when_refused(settings: Settings, database: Database) -> None:
    """The refusal comes before the bind: the port stays free."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UnsafeBind):
        Server(create_app(settings, database), "0.0.0.0", port)
    with socket.socket() as again:
        again.bind(("0.0.0.0", port))  # would fail (EADDRINUSE) had the refused server bound it


def test_make_server_serves_off_loopback_once_keys_and_a_secret_exist(settings: Settings, database: Database) -> None:
    migrate.upgrade(database)
    key = add_key(database)
    safe = dataclasses.replace(settings, processor_webhook_secret=REAL_SECRET)
    server = Server(create_app(safe, database), "0.0.0.0", 0)
    with running(server) as port:
        status, _ = get("127.0.0.1", port, "/v1/tenants/acme/balance", {"Authorization": f"Bearer {key}"})
        assert status == 200


@contextmanager
def running(server: Server) -> Iterator[int]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# ---------------------------------------------------------------------------- app.app under uvicorn


@contextmanager
def external_uvicorn(app: FastAPI, host: str) -> Iterator[int]:
    """`uvicorn app:app --host HOST` as an operator would run it: uvicorn's own Config, not ours."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        listener.listen(64)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            yield listener.getsockname()[1]
        finally:
            server.should_exit = True
            thread.join(10)


@needs_lan
def test_app_under_an_external_server_refuses_local_mode_on_a_lan_address(
    settings: Settings, database: Database
) -> None:
    assert LAN is not None
    migrate.upgrade(database)
    with external_uvicorn(create_app(settings, database), "0.0.0.0") as port:
        status, body = get(LAN, port, "/v1/tenants/default/balance")
        assert (status, body["error"]) == (403, "unsafe_exposure")
        status, body = get(LAN, port, "/v1/accounts")
        assert (status, body["error"]) == (403, "unsafe_exposure")
        assert get(LAN, port, "/healthz")[0] == 200
        # The same server reached on loopback is local mode as usual.
        assert get("127.0.0.1", port, "/v1/tenants/default/balance")[0] == 200


@needs_lan
def test_app_under_an_external_server_refuses_forged_webhooks_on_a_lan_address(
    settings: Settings, database: Database
) -> None:
    assert LAN is not None
    migrate.upgrade(database)
    key = add_key(database)
    with external_uvicorn(create_app(settings, database), "0.0.0.0") as port:
        status, body = post_webhook(LAN, port, DEV_WEBHOOK_SECRET)
        assert (status, body["error"]) == (403, "unsafe_exposure")
        assert get(LAN, port, "/v1/tenants/acme/balance", {"Authorization": f"Bearer {key}"})[0] == 200


LAN_SCOPE_SERVER = ("192.0.2.10", 8000)  # a documentation address, never contacted: the scope is fake


async def _call(
    app: Any, path: str, method: str = "GET", server: tuple[str, int] | None = LAN_SCOPE_SERVER
) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"paycore.example"), (b"content-type", b"application/json")],
        "server": server,
        "client": ("198.51.100.7", 50000),
    }
    await app(scope, receive, send)
    body = b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


def test_the_guard_reads_the_local_address_of_each_request(settings: Settings, database: Database) -> None:
    """A fake scope: the address a request arrived on decides, whatever its Host header says."""
    import anyio

    migrate.upgrade(database)
    app = create_app(settings, database)
    app.mount("/sandbox", FastAPI())

    async def scenario() -> None:
        status, body = await _call(app, "/v1/tenants/default/balance")
        assert (status, body["error"]) == (403, "unsafe_exposure")
        assert "local mode" in body["message"]
        assert (await _call(app, "/sandbox/v1/sandbox/faults"))[0] == 403
        assert (await _call(app, "/healthz"))[0] == 200
        assert (await _call(app, "/v1/tenants/default/balance", server=("127.0.0.1", 8000)))[0] == 200
        assert (await _call(app, "/v1/tenants/default/balance", server=None))[0] == 200
        unix_socket: Any = ("/run/paycore.sock", None)  # uvicorn's scope on a unix socket
        assert (await _call(app, "/v1/tenants/default/balance", server=unix_socket))[0] == 200
        assert (await _call(app, "/v1/tenants/default/balance", server=("testserver", 80)))[0] == 200
        assert (await _call(app, "/v1/tenants/default/balance", server=("fd00::2", 80)))[0] == 403

    anyio.run(scenario)


def test_the_guard_refuses_the_sandbox_and_the_default_secret_even_with_keys(
    settings: Settings, database: Database
) -> None:
    import anyio

    migrate.upgrade(database)
    add_key(database)
    app = create_app(settings, database)  # default webhook secret
    app.mount("/sandbox", FastAPI())

    async def scenario() -> None:
        assert (await _call(app, "/v1/webhooks/processor", "POST"))[0] == 403
        assert (await _call(app, "/sandbox/v1/sandbox/faults"))[0] == 403
        assert (await _call(app, "/v1/tenants/acme/balance"))[0] == 401  # authenticated: the usual rules
        assert (await _call(app, "/v1/webhooks/processor", "POST", server=("127.0.0.1", 1)))[0] != 403

    anyio.run(scenario)
