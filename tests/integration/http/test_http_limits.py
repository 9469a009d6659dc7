"""Issue 18 points 2 and 3 (SPEC §3, §13, ADR 0013): the HTTP edge, over real sockets on 127.0.0.1.

Head size (431), the time to receive a request (408, slowloris), keep-alive idle time,
connections per process (503 `server_busy`), chunked bodies (413, 415), protocol errors (400
`invalid_http`), no redirect built from the request, forwarded headers believed only from
configured proxies. Every refusal is the standard compact JSON error body.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi import FastAPI, Request

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.server import Server
from tests.support.raw_http import assert_json_error, closed_by_server, connect, exchange, read_response

RECEIVE_TIMEOUT_MS = 300
KEEPALIVE_IDLE_MS = 300
HEADER_BYTES_MAX = 4096
BODY_BYTES_MAX = 2048


@pytest.fixture
def small(settings: Settings, database: Database) -> Iterator[int]:
    """paycore with small limits, served by `Server` on a loopback port."""
    migrate.upgrade(database)
    bounded = dataclasses.replace(
        settings,
        http_header_bytes_max=HEADER_BYTES_MAX,
        http_request_receive_timeout_ms=RECEIVE_TIMEOUT_MS,
        http_keepalive_idle_ms=KEEPALIVE_IDLE_MS,
        http_connections_max=4,
        body_bytes_max=BODY_BYTES_MAX,
    )
    with serving(create_app(bounded, database), bounded) as port:
        yield port


@contextmanager
def serving(app: Any, settings: Settings) -> Iterator[int]:
    server = Server(app, "127.0.0.1", 0, settings=settings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# ---------------------------------------------------------------------------- header bytes


def test_a_head_over_the_bound_is_431(small: int) -> None:
    big = b"x" * (HEADER_BYTES_MAX + 1)
    status, headers, body = exchange(small, b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + big + b"\r\n\r\n")
    assert status == 431
    assert headers["connection"] == "close"
    assert_json_error(body, "request_header_too_large")


def test_a_head_over_the_bound_is_refused_before_it_ends(small: int) -> None:
    """The head never ends: refused once the bound is passed, not buffered forever."""
    with connect(small) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: ")
        for _ in range(4):
            sock.sendall(b"y" * HEADER_BYTES_MAX)
        status, _, body = read_response(sock)
    assert status == 431
    assert_json_error(body, "request_header_too_large")


def test_a_head_within_the_bound_is_served(small: int) -> None:
    filler = b"z" * (HEADER_BYTES_MAX - 200)
    status, _, _ = exchange(small, b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Fill: " + filler + b"\r\n\r\n")
    assert status == 200


def test_the_default_head_bound_is_64_kib() -> None:
    assert Settings().http_header_bytes_max == 65_536


# ---------------------------------------------------------------------------- receive time, keep-alive


def test_a_slow_head_is_408_and_closed(small: int) -> None:
    """Slowloris: a byte at a time keeps the connection no longer than the receive bound."""
    started = time.monotonic()
    with connect(small) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        status = 0
        for _ in range(50):
            try:
                sock.sendall(b"X")
            except OSError:
                break
            time.sleep(0.05)
            sock.setblocking(False)
            try:
                peeked = sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                peeked = b""
            finally:
                sock.setblocking(True)
            if peeked:
                status, _, body = read_response(sock)
                break
    assert status == 408
    assert_json_error(body, "request_timeout")
    assert time.monotonic() - started < 2.0


def test_a_slow_body_is_408(small: int) -> None:
    with connect(small) as sock:
        head = b"POST /v1/accounts HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        sock.sendall(head + b'{"code":')
        status, headers, body = read_response(sock)
        assert closed_by_server(sock)
    assert status == 408 and headers["connection"] == "close"
    assert_json_error(body, "request_timeout")


def test_a_connection_that_sends_nothing_is_closed(small: int) -> None:
    with connect(small) as sock:
        started = time.monotonic()
        status, _, body = read_response(sock)
        assert time.monotonic() - started < 2.0
    assert status == 408
    assert_json_error(body, "request_timeout")


def test_an_idle_keepalive_connection_is_closed(small: int) -> None:
    with connect(small) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
        assert read_response(sock)[0] == 200
        started = time.monotonic()
        assert closed_by_server(sock)  # no 408 after an answered request: just closed
        assert time.monotonic() - started < 2.0


def test_a_slow_app_is_not_a_slow_request(settings: Settings) -> None:
    """The bound is on receiving the request, not on answering it."""
    app = FastAPI()

    @app.get("/slow")
    def slow() -> dict[str, int]:
        time.sleep(RECEIVE_TIMEOUT_MS * 3 / 1000)
        return {"ok": 1}

    bounded = dataclasses.replace(settings, http_request_receive_timeout_ms=RECEIVE_TIMEOUT_MS)
    with serving(app, bounded) as port:
        assert exchange(port, b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")[0] == 200


# ---------------------------------------------------------------------------- connections


def test_connections_over_the_bound_are_503_server_busy(small: int) -> None:
    held = [connect(small) for _ in range(4)]
    try:
        time.sleep(0.1)  # let the server accept them
        status, headers, body = exchange(small, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
        assert status == 503
        assert headers["retry-after"] == "1"
        assert_json_error(body, "server_busy")
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.1)
    assert exchange(small, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")[0] == 200


# ---------------------------------------------------------------------------- bodies


def chunked(content_type: bytes, body: bytes, path: bytes = b"/v1/accounts") -> bytes:
    head = b"POST " + path + b" HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
    if content_type:
        head += b"Content-Type: " + content_type + b"\r\n"
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 512]), body[i : i + 512]) for i in range(0, len(body), 512))
    return head + b"\r\n" + chunks + b"0\r\n\r\n"


@pytest.mark.parametrize("path", [b"/v1/accounts", b"/v1/tenants/default/credits"], ids=["sync", "async"])
def test_a_chunked_body_over_the_bound_is_413(small: int, path: bytes) -> None:
    body = json.dumps({"code": "c", "metadata": {"pad": "p" * (BODY_BYTES_MAX * 2)}}).encode()
    status, _, answer = exchange(small, chunked(b"application/json", body, path))
    assert status == 413
    assert_json_error(answer, "request_too_large")


def test_a_chunked_body_that_is_not_json_is_415(small: int) -> None:
    status, _, answer = exchange(small, chunked(b"application/x-www-form-urlencoded", b"code=c&currency=USD"))
    assert status == 415
    assert_json_error(answer, "unsupported_media_type")


def test_a_body_over_the_bound_by_content_length_is_compact_413(small: int) -> None:
    raw = b"POST /v1/accounts HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 99999\r\n\r\n"
    status, _, answer = exchange(small, raw)
    assert status == 413
    assert_json_error(answer, "request_too_large")


# ---------------------------------------------------------------------------- protocol errors


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nBad Header Name: x\r\n\r\n",
        b"POST /v1/accounts HTTP/1.1\r\nHost: a\r\nContent-Length: nope\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello on the plain port
    ],
    ids=["request-line", "version", "header-name", "content-length", "tls"],
)
def test_protocol_errors_are_400_invalid_http_in_json(small: int, raw: bytes) -> None:
    status, headers, body = exchange(small, raw)
    assert status == 400
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert_json_error(body, "invalid_http")


# ---------------------------------------------------------------------------- redirects, proxies


@pytest.mark.parametrize("path", [b"/v1/accounts/", b"/v1/tenants/default/balance/", b"/healthz/"])
def test_a_trailing_slash_is_404_never_a_redirect(small: int, path: bytes) -> None:
    raw = b"GET " + path + b" HTTP/1.1\r\nHost: evil.example\r\nX-Forwarded-Proto: https\r\n\r\n"
    status, headers, body = exchange(small, raw)
    assert status == 404
    assert "location" not in headers
    assert_json_error(body, "not_found")


def whoami_app() -> FastAPI:
    app = FastAPI()

    @app.get("/whoami")
    def whoami(request: Request) -> dict[str, Any]:
        return {"client": request.client.host if request.client else None, "scheme": request.url.scheme}

    return app


def test_forwarded_headers_are_ignored_by_default(settings: Settings) -> None:
    raw = b"GET /whoami HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\n\r\n"
    with serving(whoami_app(), settings) as port:
        _, _, body = exchange(port, raw)
    assert json.loads(body) == {"client": "127.0.0.1", "scheme": "http"}


def test_forwarded_headers_are_believed_from_a_configured_proxy(settings: Settings) -> None:
    raw = b"GET /whoami HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\n\r\n"
    with serving(whoami_app(), dataclasses.replace(settings, forwarded_allow_ips="127.0.0.1")) as port:
        _, _, body = exchange(port, raw)
    assert json.loads(body) == {"client": "203.0.113.9", "scheme": "https"}


def test_an_upgrade_request_is_answered_as_plain_http(small: int) -> None:
    """No WebSocket is served: the request is answered, and nothing else is written after it."""
    upgrade = b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    with connect(small) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + upgrade + b"Sec-WebSocket-Version: 13\r\n\r\n")
        assert read_response(sock)[0] == 200
        assert closed_by_server(sock)  # by the keep-alive bound, with no 408 written first
