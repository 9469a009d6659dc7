"""Issue 29 point 2: `paycore processor serve` (the sandbox as its own service) at the HTTP edge,
as a real OS process: the HTTP limits of `paycore serve` (paycore's one `Server` and body bound,
the same PAYCORE_HTTP_* settings), and the admin token that guards the endpoints changing what
the processor answers, required off loopback. SQLite only: none of it depends on the database.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from paycore.cli.processor_commands import app
from tests.support.exposure import LAN, UNSAFE_HOSTS
from tests.support.raw_http import (
    assert_json_error,
    closed_by_server,
    connect,
    read_response,
    send_until_answered,
)

PAYCORE = Path(sys.executable).with_name("paycore")
START_TIMEOUT_S = 30
CLI_TIMEOUT_S = 60
TOKEN = "sbx_admin_0123456789abcdef"
RECEIVE_TIMEOUT_MS = 500
MIB = 1024 * 1024
# What a refused client may have sent anyway: the kernel's socket buffers on both ends of a
# loopback connection (several MiB with autotuning) and the server's lingering read (1 MiB).
# Far below 60 MB: the body was not read.
BUFFERED_BYTES_MAX = 16 * MIB
PLAN = {"seed": 1, "rules": [{"fault": "error_500", "next_n": 1, "ops": ["charge"]}]}


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env["PAYCORE_SANDBOX_DATABASE_URL"] = f"sqlite:///{tmp_path / 'sandbox.db'}"
    env["PAYCORE_SANDBOX_WEBHOOK_URL"] = "http://127.0.0.1:9/v1/webhooks/processor"  # nobody listens
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def processor_service(tmp_path: Path, *args: str, **env: str) -> Iterator[int]:
    """`paycore processor serve ARGS` on a free port, ready (its /healthz answered)."""
    port = free_port()
    log_path = tmp_path / "processor.log"
    with log_path.open("w+") as log:
        command = [str(PAYCORE), "processor", "serve", "--port", str(port), *args]
        process = subprocess.Popen(command, env=environment(tmp_path, **env), stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    assert call(port, "GET", "/healthz")[0] == 200
                    break
                except OSError:
                    assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
                    time.sleep(0.1)
            yield port
        finally:
            process.terminate()
            process.wait(10)


def call(
    port: int, method: str, path: str, body: Any = None, *, token: str | None = None, host: str = "127.0.0.1"
) -> tuple[int, Any, dict[str, str]]:
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None, {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def trickle(count: int, *, interval_s: float) -> Iterator[bytes]:
    """A byte at a time, `interval_s` apart: a slow client (slowloris)."""
    for _ in range(count):
        time.sleep(interval_s)
        yield b"X"


def run_serve(tmp_path: Path, *args: str, **env: str) -> tuple[int, str]:
    result = subprocess.run(
        [str(PAYCORE), "processor", "serve", "--port", "0", *args],
        env=environment(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    return result.returncode, " ".join((result.stdout + result.stderr).split())


# ---------------------------------------------------------------------------- the HTTP limits


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """One service for the limit tests: paycore's defaults, but a short receive bound."""
    tmp_path = tmp_path_factory.mktemp("processor")
    with processor_service(tmp_path, PAYCORE_HTTP_REQUEST_RECEIVE_TIMEOUT_MS=str(RECEIVE_TIMEOUT_MS)) as port:
        yield port


def test_an_8_mb_header_is_431(service: int) -> None:
    """paycore's default head bound (64 KiB) holds here too; it was answered 200."""
    with connect(service) as sock:
        head = b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: "
        sent = send_until_answered(sock, [head, *[b"h" * 65_536] * 128, b"\r\n\r\n"])
        status, headers, body = read_response(sock)
    assert status == 431, (status, body)
    assert headers["connection"] == "close"
    assert_json_error(body, "request_header_too_large")
    assert sent < 8 * MIB  # refused on the way, not after reading it all


def test_a_60_mb_body_is_413_before_it_is_read(service: int) -> None:
    """By Content-Length: answered as soon as the head arrives (it was read whole)."""
    with connect(service) as sock:
        head = b"POST /v1/charges HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
        head += b"Content-Length: %d\r\n\r\n" % (60 * MIB)
        sent = send_until_answered(sock, [head, *[b" " * 65_536] * (60 * 16)])
        status, _, body = read_response(sock)
    assert status == 413
    assert_json_error(body, "request_too_large")
    assert sent < BUFFERED_BYTES_MAX


def test_a_60_mb_chunked_body_is_413_once_past_the_bound(service: int) -> None:
    chunk = b"%x\r\n%s\r\n" % (65_536, b" " * 65_536)
    with connect(service) as sock:
        head = b"POST /v1/charges HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n"
        sent = send_until_answered(sock, [head, *[chunk] * (60 * 16)])
        status, headers, body = read_response(sock)
    assert status == 413 and headers["connection"] == "close"
    assert_json_error(body, "request_too_large")
    assert sent < BUFFERED_BYTES_MAX


def test_a_slow_client_is_timed_out(service: int) -> None:
    """PAYCORE_HTTP_REQUEST_RECEIVE_TIMEOUT_MS, as for `paycore serve`: a head sent a byte at a
    time is refused 408 and the connection closed (it was held as long as the client liked)."""
    started = time.monotonic()
    with connect(service) as sock:
        sock.sendall(b"POST /v1/charges HTTP/1.1\r\n")
        send_until_answered(sock, trickle(200, interval_s=0.05))
        status, _, body = read_response(sock)
        assert closed_by_server(sock)
    assert status == 408
    assert_json_error(body, "request_timeout")
    assert time.monotonic() - started < 5


def test_a_connection_that_sends_nothing_is_closed(service: int) -> None:
    with connect(service) as sock:
        status, _, body = read_response(sock)
    assert status == 408
    assert_json_error(body, "request_timeout")


def test_a_body_that_is_not_json_is_415(service: int) -> None:
    with connect(service) as sock:
        form = b"request_id=a&amount_minor=1"
        sock.sendall(
            b"POST /v1/charges HTTP/1.1\r\nHost: a\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(form), form)
        )
        status, _, body = read_response(sock)
    assert status == 415
    assert_json_error(body, "unsupported_media_type")


# ---------------------------------------------------------------------------- the admin token


def test_serve_refuses_a_public_address_without_an_admin_token(tmp_path: Path) -> None:
    status, output = run_serve(tmp_path, "--host", "0.0.0.0")
    assert status == 2, output
    assert "refusing to bind 0.0.0.0" in output and "PAYCORE_SANDBOX_ADMIN_TOKEN" in output
    assert '"event":"start_refused"' in output and '"reason":"no_admin_token"' in output
    assert not (tmp_path / "sandbox.db").exists()  # refused before the sandbox opened its database


@pytest.mark.parametrize("host", UNSAFE_HOSTS)
def test_every_address_but_loopback_needs_an_admin_token(
    host: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In process (the rule, for each of this machine's unsafe addresses; the command's start-up
    is the test above): exit status 2, and nothing opened."""
    result = CliRunner().invoke(app, ["serve", "--host", host], env=environment(tmp_path))
    assert result.exit_code == 2, result.output
    assert f"refusing to bind {host}" in caplog.text
    assert not (tmp_path / "sandbox.db").exists()


@pytest.mark.parametrize("token", ["short", "has a space in it, sixteen+", "x" * 257])
def test_serve_refuses_an_admin_token_that_cannot_be_one(token: str, tmp_path: Path) -> None:
    env = environment(tmp_path, PAYCORE_SANDBOX_ADMIN_TOKEN=token, COLUMNS="200")
    result = CliRunner().invoke(app, ["serve", "--host", "127.0.0.1"], env=env)
    assert result.exit_code == 2, result.output
    assert "admin token must be" in result.output
    assert not (tmp_path / "sandbox.db").exists()


def test_off_loopback_the_admin_endpoints_need_the_token(tmp_path: Path) -> None:
    with processor_service(tmp_path, "--host", "0.0.0.0", PAYCORE_SANDBOX_ADMIN_TOKEN=TOKEN) as port:
        for host in ["127.0.0.1", *([LAN] if LAN else [])]:
            for token in (None, "sbx_admin_not_the_token_00", TOKEN + "x", TOKEN[:-1]):
                for method, path, body in (
                    ("PUT", "/v1/sandbox/faults", PLAN),
                    ("DELETE", "/v1/sandbox/faults", None),
                    ("POST", "/v1/sandbox/webhooks/deliver", {}),
                    ("POST", "/v1/sandbox/disputes", {"payment_reference": "ch_unknown"}),
                ):
                    status, answer, headers = call(port, method, path, body, token=token, host=host)
                    assert status == 401, (host, token, method, path, status, answer)
                    assert answer["error"] == "unauthorized" and headers["www-authenticate"] == "Bearer"
            assert call(port, "GET", "/v1/sandbox/faults", host=host)[1]["active"] is False  # nothing changed

        status, answer, _ = call(port, "PUT", "/v1/sandbox/faults", PLAN, token=TOKEN)
        assert status == 200 and answer["active"] is True, answer
        # The processor's own API needs no token (paycore calls it without one), and the plan applies.
        charge = {
            "request_id": "pay_1",
            "merchant_id": "acme",
            "amount_minor": 100,
            "currency": "USD",
            "token": "tok_ok",
        }
        assert call(port, "POST", "/v1/charges", charge)[0] == 500
        assert call(port, "POST", "/v1/charges", charge)[0] == 200
        assert call(port, "DELETE", "/v1/sandbox/faults", token=TOKEN)[0] == 200
        assert call(port, "POST", "/v1/sandbox/webhooks/deliver", {}, token=TOKEN)[0] == 200
        processor_charge_id = call(port, "GET", "/v1/charges/pay_1")[1]["processor_charge_id"]
        opened = call(port, "POST", "/v1/sandbox/disputes", {"payment_reference": processor_charge_id}, token=TOKEN)
        assert (opened[0], opened[1]["status"]) == (200, "needs_response"), opened


def test_on_loopback_without_a_token_the_admin_endpoints_are_open(tmp_path: Path) -> None:
    """As tests and `paycore serve --dev` use them."""
    with processor_service(tmp_path, "--host", "127.0.0.1") as port:
        assert call(port, "PUT", "/v1/sandbox/faults", PLAN)[0] == 200
        assert call(port, "DELETE", "/v1/sandbox/faults")[0] == 200


def test_on_loopback_a_token_given_is_required(tmp_path: Path) -> None:
    with processor_service(tmp_path, "--admin-token", TOKEN) as port:
        assert call(port, "PUT", "/v1/sandbox/faults", PLAN)[0] == 401
        assert call(port, "PUT", "/v1/sandbox/faults", PLAN, token=TOKEN)[0] == 200
