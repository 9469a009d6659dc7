"""paycore's own HTTP/1.1 protocol (`http/protocol.py`, `http/cycle.py`; ADR 0013, ADR 0026
step 4), over real sockets on 127.0.0.1, with bare ASGI apps: what uvicorn's protocol did and
this one had to do anew. Pipelined requests answered in order, `Expect: 100-continue`, `HEAD`,
chunked and Content-Length responses, `Connection: close` and HTTP/1.0, a request body past the
read bound, back-pressure on a large response, a client gone mid-request (`http.disconnect`),
an app that fails (500), and uvicorn's graceful shutdown."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from paycore.config import Settings
from paycore.http.server import Server
from tests.support.raw_http import closed_by_server, connect

WAIT_S = 5


@contextmanager
def serving(app: Any) -> Iterator[tuple[int, Server]]:
    server = Server(app, "127.0.0.1", 0, settings=Settings())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def read_one(stream: io.BufferedReader) -> tuple[int, dict[str, str], bytes]:
    """One response from a buffered stream, framed by Content-Length or chunked; the bytes of
    the next one are left in the stream."""
    status_line = stream.readline()
    if not status_line:
        raise ConnectionError("closed before a response")
    assert status_line.startswith(b"HTTP/1.1 "), status_line  # nothing before it: no stray body
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while (size := int(stream.readline().strip(), 16)) > 0:
            body += stream.read(size)
            stream.readline()
        stream.readline()
        return status, headers, body
    return status, headers, stream.read(int(headers.get("content-length", "0")))


async def answer(send: Any, body: bytes, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    head = [(b"content-length", b"%d" % len(body)), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        chunk: bytes = message["body"]
        body += chunk
        if not message["more_body"]:
            return body


# ---------------------------------------------------------------------------- keep-alive, pipelining


async def paths(scope: Any, receive: Any, send: Any) -> None:
    """Answers its path, after a pause for /slow; echoes a POST's body length."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(0.3)
    body = await read_body(receive)
    text = scope["path"].encode() if scope["method"] != "POST" else b"%d" % len(body)
    await answer(send, text)


def test_pipelined_requests_are_answered_in_the_order_they_were_sent() -> None:
    with serving(paths) as (port, _), connect(port) as sock:
        sock.sendall(b"".join(b"GET /%s HTTP/1.1\r\nHost: a\r\n\r\n" % path for path in (b"slow", b"one", b"two")))
        stream = sock.makefile("rb")
        bodies = [read_one(stream)[2] for _ in range(3)]
    assert bodies == [b"/slow", b"/one", b"/two"]


def test_a_kept_alive_connection_serves_one_request_after_another() -> None:
    with serving(paths) as (port, _), connect(port) as sock:
        stream = sock.makefile("rb")
        for number in range(5):
            sock.sendall(b"GET /n%d HTTP/1.1\r\nHost: a\r\n\r\n" % number)
            status, headers, body = read_one(stream)
            assert (status, body) == (200, b"/n%d" % number)
            assert "connection" not in headers
            assert headers["server"] == "uvicorn" and headers["date"].endswith(" GMT")


def test_connection_close_and_http_1_0_end_the_connection_after_the_answer() -> None:
    with serving(paths) as (port, _):
        for raw in (b"GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", b"GET /a HTTP/1.0\r\n\r\n"):
            with connect(port) as sock:
                sock.sendall(raw)
                stream = sock.makefile("rb")
                status, headers, body = read_one(stream)
                assert (status, headers["connection"], body) == (200, "close", b"/a")
                assert stream.read() == b""  # closed by the server


def test_a_body_larger_than_the_read_bound_arrives_whole() -> None:
    """Reading pauses while 64 KiB of body wait for the app, and resumes as it takes them."""
    body = bytes(range(256)) * 4096  # 1 MiB
    with serving(paths) as (port, _), connect(port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert read_one(sock.makefile("rb"))[2] == b"%d" % len(body)


# ---------------------------------------------------------------------------- Expect, HEAD, chunked


def test_expect_100_continue_is_answered_when_the_app_reads_the_body() -> None:
    with serving(paths) as (port, _), connect(port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        stream = sock.makefile("rb")
        assert stream.readline() == b"HTTP/1.1 100 Continue\r\n"
        assert stream.readline() == b"\r\n"
        sock.sendall(b"hello")
        assert read_one(stream)[:3:2] == (200, b"5")


def test_expect_100_continue_is_not_answered_when_the_app_answers_without_the_body() -> None:
    async def refuses(scope: Any, receive: Any, send: Any) -> None:
        del scope, receive
        await answer(send, b"no", status=413, headers=[(b"connection", b"close")])

    with serving(refuses) as (port, _), connect(port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        status, _, body = read_one(sock.makefile("rb"))
    assert (status, body) == (413, b"no")


def test_head_is_answered_with_the_head_alone() -> None:
    """The length the app names, no body: the next answer on the connection is read whole."""
    with serving(paths) as (port, _), connect(port) as sock:
        sock.sendall(b"HEAD /ten-chars HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n")
        stream = sock.makefile("rb")
        status_line = stream.readline()
        head = b""
        while (line := stream.readline()) != b"\r\n":
            head += line
        assert status_line == b"HTTP/1.1 200 OK\r\n" and b"content-length: 10\r\n" in head
        assert read_one(stream)[2] == b"/b"


def test_a_response_without_a_length_is_chunked_and_the_connection_kept() -> None:
    async def streamed(scope: Any, receive: Any, send: Any) -> None:
        del scope, receive
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for piece in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    with serving(streamed) as (port, _), connect(port) as sock:
        stream = sock.makefile("rb")
        for _ in range(2):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            status, headers, body = read_one(stream)
            assert (status, headers["transfer-encoding"], body) == (200, "chunked", b"one two three")


# ---------------------------------------------------------------------------- flow control, disconnects


def test_a_large_response_waits_for_a_client_that_does_not_read() -> None:
    """Back-pressure: `send` waits while the socket's buffers are full, so an app streaming
    64 MiB to a client that reads nothing has sent only what the buffers hold."""
    chunk, count = bytes(range(256)) * 1024, 256  # 256 KiB, 256 times
    sent = [0]

    async def large(scope: Any, receive: Any, send: Any) -> None:
        del scope, receive
        length = b"%d" % (len(chunk) * count)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]})
        for _ in range(count):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            sent[0] += 1
        await send({"type": "http.response.body", "body": b""})

    with serving(large) as (port, _), connect(port) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        time.sleep(0.5)
        held_back_at = sent[0]
        status, _, body = read_one(sock.makefile("rb"))
    assert held_back_at < count // 2, held_back_at
    assert (status, len(body), sent[0]) == (200, len(chunk) * count, count)
    assert body[: len(chunk)] == chunk and body[-len(chunk) :] == chunk


def test_a_client_gone_mid_request_is_http_disconnect_and_its_answer_dropped() -> None:
    got: list[dict[str, Any]] = []
    first, done = threading.Event(), threading.Event()

    async def waits(scope: Any, receive: Any, send: Any) -> None:
        del scope
        got.append(await receive())
        first.set()
        got.append(await receive())
        await answer(send, b"late")  # dropped: no error
        got.append({"type": "answered"})
        done.set()

    with serving(waits) as (port, _):
        with connect(port) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
            assert first.wait(WAIT_S)
        assert done.wait(WAIT_S)
    assert got == [
        {"type": "http.request", "body": b"0123456789", "more_body": True},
        {"type": "http.disconnect"},
        {"type": "answered"},
    ]


def test_an_app_that_fails_before_answering_is_500_and_closed() -> None:
    async def fails(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    with serving(fails) as (port, _), connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        status, headers, body = read_one(sock.makefile("rb"))
        assert (status, headers["connection"], body) == (500, "close", b"Internal Server Error")
        assert closed_by_server(sock)


def test_a_graceful_shutdown_answers_the_request_in_flight_and_closes() -> None:
    """uvicorn's `Server` stops: it calls `shutdown()` on every connection it knows and waits."""
    with serving(paths) as (port, server), connect(port) as sock:
        stream = sock.makefile("rb")
        sock.sendall(b"GET /idle HTTP/1.1\r\nHost: a\r\n\r\n")
        assert read_one(stream)[2] == b"/idle"
        with connect(port) as busy:
            busy.sendall(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
            time.sleep(0.1)
            stopping = threading.Thread(target=server.shutdown)
            stopping.start()
            status, headers, body = read_one(busy.makefile("rb"))
            assert (status, headers["connection"], body) == (200, "close", b"/slow")
            assert closed_by_server(busy)
        assert stream.read() == b""  # the idle connection closed at once
        stopping.join(WAIT_S)
        assert not stopping.is_alive()
