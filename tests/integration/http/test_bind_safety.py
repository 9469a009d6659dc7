"""Issue 18 point 1 (SPEC §3.2, ADR 0013): every entry point refuses to expose local mode or the
public default webhook secret off loopback, and the sandbox's API is never served there.

Entry points: `app.make_server` (the `Server` class), `app.app` under a separately run ASGI
server (refused per request, by the address the request arrived on), `paycore serve` and
`paycore serve --dev` (exit status 2). Addresses: 0.0.0.0, ::, this machine's own LAN address
and its hostname. Traffic goes only to this machine's own addresses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPConnection
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
from paycore.kit.clock import now_us
from paycore.kit.signing import SIGNATURE_HEADER, sign
from paycore.tenants import service as tenants

PAYCORE = Path(sys.executable).with_name("paycore")
CLI_TIMEOUT_S = 60
START_TIMEOUT_S = 30
REAL_SECRET = "whsec_test_not_the_default"


def lan_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, or None when it has only loopback."""
    candidates: list[str] = []
    try:
        shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=5)
        for line in shown.stdout.splitlines():
            fields = line.split()
            if "inet" in fields:
                candidates.append(fields[fields.index("inet") + 1].split("/")[0])
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            candidates.append(str(info[4][0]))
    except OSError:
        pass
    for address in candidates:
        if not is_loopback(address):
            return address
    return None


LAN = lan_address()
needs_lan = pytest.mark.skipif(LAN is None, reason="this machine has no non-loopback address to bind")
HOSTNAME = socket.gethostname()
# A LAN address and a hostname are refused whatever they resolve to; 0.0.0.0 and :: bind everything.
UNSAFE_HOSTS = ["0.0.0.0", "::", HOSTNAME, *([LAN] if LAN else [])]


def add_key(database: Database) -> str:
    return database.transaction(lambda c: tenants.create_tenant(c, "acme", now_us=now_us())).api_key


def get(host: str, port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    connection = HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None
    finally:
        connection.close()


def post_webhook(host: str, port: int, secret: str) -> tuple[int, Any]:
    body = json.dumps({"id": "evt_forged", "type": "charge.succeeded", "data": {}}).encode()
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(secret, now_us() // 1_000_000, body)}
    connection = HTTPConnection(host, port, timeout=10)
    try:
        connection.request("POST", "/v1/webhooks/processor", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


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


# ---------------------------------------------------------------------------- paycore serve


def run_serve(database_url: str, *args: str, secret: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env["PAYCORE_DATABASE_URL"] = database_url
    env["PAYCORE_SANDBOX_DATABASE_URL"] = database_url.replace(".db", "-sandbox.db")
    if secret is not None:
        env["PAYCORE_PROCESSOR_WEBHOOK_SECRET"] = secret
    return subprocess.run(
        [str(PAYCORE), "serve", "--port", "0", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("dev", [False, True], ids=["serve", "serve-dev"])
@pytest.mark.parametrize("host", UNSAFE_HOSTS)
def test_serve_refuses_local_mode_off_loopback(host: str, dev: bool, tmp_path: Path) -> None:
    """SQLite only: the rule does not depend on the database (the in-process tests run both)."""
    result = run_serve(f"sqlite:///{tmp_path}/p.db", "--host", host, *(["--dev"] if dev else []), secret=REAL_SECRET)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert f"refusing to bind {host}" in output and "no API key exists yet" in output


@pytest.mark.parametrize("dev", [False, True], ids=["serve", "serve-dev"])
@pytest.mark.parametrize("host", UNSAFE_HOSTS)
def test_serve_refuses_the_default_secret_off_loopback(host: str, dev: bool, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    database = Database(Settings(database_url=url))
    migrate.upgrade(database)
    add_key(database)
    database.dispose()
    result = run_serve(url, "--host", host, *(["--dev"] if dev else []))
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert "PAYCORE_PROCESSOR_WEBHOOK_SECRET is the public development default" in output


@contextmanager
def serve_dev(tmp_path: Path, host: str, **env: str) -> Iterator[int]:
    """`paycore serve --dev --host HOST` on a free port, until the block ends."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    environment.update(PAYCORE_SANDBOX_DATABASE_URL=f"sqlite:///{tmp_path}/s.db", **env)
    log_path = tmp_path / "serve.log"
    with log_path.open("w+") as log:
        command = [str(PAYCORE), "serve", "--dev", "--host", host, "--port", str(port)]
        process = subprocess.Popen(command, env=environment, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    assert get("127.0.0.1", port, "/healthz")[0] == 200
                    break
                except OSError:
                    assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
                    time.sleep(0.1)
            yield port
        finally:
            process.terminate()
            process.wait(10)


def test_serve_dev_does_not_mount_the_sandbox_off_loopback(tmp_path: Path) -> None:
    """With a key and a real secret `serve --dev` may bind 0.0.0.0, but without /sandbox."""
    url = f"sqlite:///{tmp_path}/p.db"
    database = Database(Settings(database_url=url))
    migrate.upgrade(database)
    add_key(database)
    database.dispose()
    with serve_dev(tmp_path, "0.0.0.0", PAYCORE_DATABASE_URL=url, PAYCORE_PROCESSOR_WEBHOOK_SECRET=REAL_SECRET) as port:
        for host in ["127.0.0.1", *([LAN] if LAN else [])]:
            status, body = get(host, port, "/sandbox/v1/sandbox/faults")
            assert status in (403, 404) and body["error"] in ("unsafe_exposure", "not_found"), (host, status, body)
    assert "not mounted" in " ".join((tmp_path / "serve.log").read_text().split())


def test_serve_dev_mounts_the_sandbox_on_loopback(tmp_path: Path) -> None:
    with serve_dev(tmp_path, "127.0.0.1", PAYCORE_DATABASE_URL=f"sqlite:///{tmp_path}/p.db") as port:
        assert get("127.0.0.1", port, "/sandbox/v1/sandbox/faults")[0] == 200


def test_serve_on_a_port_in_use_exits_1_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_serve(f"sqlite:///{tmp_path}/p.db", "--host", "127.0.0.1", "--port", str(port))
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1, output
    assert f"cannot bind 127.0.0.1:{port}" in output and "Traceback" not in output
