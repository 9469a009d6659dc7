"""A response's head and body go to the socket in one write (`http/cycle.py`), in order, before
a close, and nothing is held past the `send` that made it but a head waiting for its body."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from paycore.http.protocol import HttpProtocol


class RecordingTransport(asyncio.Transport):
    """The socket's transport, as far as the protocol uses it: what was written, and when closed."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))
        self.events.append("write")

    def close(self) -> None:
        self.closing = True
        self.events.append("close")

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def hello(scope: Any, receive: Any, send: Any) -> None:
    del receive
    assert scope["type"] == "http"
    body = scope["path"].encode()
    length = str(len(body)).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]})
    await send({"type": "http.response.body", "body": body})


async def served(raw: bytes, app: Any = hello) -> RecordingTransport:
    config = Config(app=app, lifespan="off", log_config=None, access_log=False)
    config.load()
    protocol = HttpProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(raw)
    for _ in range(20):  # the app's task, then the pass that sends what it wrote
        await asyncio.sleep(0)
    protocol.connection_lost(None)
    return transport


def test_a_response_is_one_write_of_its_head_and_body() -> None:
    transport = asyncio.run(served(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\n"))
    assert len(transport.writes) == 1, transport.writes
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert body == b"/one"


def test_pipelined_responses_keep_their_order() -> None:
    transport = asyncio.run(served(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n"))
    sent = b"".join(transport.writes)
    assert sent.count(b"HTTP/1.1 200 OK") == 2
    assert sent.index(b"\r\n\r\n/one") < sent.index(b"\r\n\r\n/two")


def test_a_close_sends_what_is_kept_first() -> None:
    """A response that ends the connection is written whole, then the connection closed."""
    transport = asyncio.run(served(b"GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
    assert transport.events[:2] == ["write", "close"], transport.events
    assert transport.writes[0].endswith(b"\r\n\r\n/last")
    assert b"connection: close\r\n" in transport.writes[0]


def test_writes_are_sent_by_the_send_that_made_them() -> None:
    """A streamed response: the head goes with the first chunk, each chunk is written by its
    own `send` (never held for a later one), and the last chunk ends the chunked body."""
    seen: list[int] = []
    transport = RecordingTransport()

    async def streamed(scope: Any, receive: Any, send: Any) -> None:
        del scope, receive
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(len(transport.writes))
        for piece in (b"a", b"bc"):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            seen.append(len(transport.writes))
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def run() -> None:
        config = Config(app=streamed, lifespan="off", log_config=None, access_log=False)
        config.load()
        protocol = HttpProtocol(config, ServerState(), {}, asyncio.get_running_loop())
        protocol.connection_made(transport)
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        for _ in range(20):
            await asyncio.sleep(0)
        protocol.connection_lost(None)

    asyncio.run(run())
    assert seen == [0, 1, 2]  # the head kept for its body, then each chunk written at once
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"transfer-encoding: chunked\r\n" in transport.writes[0]
    assert transport.writes[0].endswith(b"\r\n\r\n1\r\na\r\n")
    assert transport.writes[1:] == [b"2\r\nbc\r\n", b"0\r\n\r\n"]
