"""A response's head and body go to the socket in one write (`http/coalesced.py`), in order,
before a close, and never held past the loop pass that wrote them."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from paycore.http.coalesced import CoalescedWrites
from paycore.http.protocol import LimitedHttpToolsProtocol


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


async def served(raw: bytes) -> RecordingTransport:
    config = Config(app=hello, lifespan="off", log_config=None, access_log=False)
    config.load()
    protocol = LimitedHttpToolsProtocol(config, ServerState(), {}, asyncio.get_running_loop())
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
    async def written_then_closed() -> RecordingTransport:
        inner = RecordingTransport()
        outer = CoalescedWrites(inner, asyncio.get_running_loop())
        outer.write(b"head ")
        outer.write(b"body")
        assert inner.writes == []  # kept until the pass ends
        outer.close()
        await asyncio.sleep(0)
        return inner

    inner = asyncio.run(written_then_closed())
    assert inner.writes == [b"head body"]
    assert inner.events == ["write", "close"]


def test_writes_are_sent_at_the_end_of_the_pass_that_made_them() -> None:
    async def two_passes() -> list[list[bytes]]:
        inner = RecordingTransport()
        outer = CoalescedWrites(inner, asyncio.get_running_loop())
        outer.write(b"a")
        outer.write(bytearray(b"b"))
        assert outer.get_write_buffer_size() == 2
        await asyncio.sleep(0)
        after_first = list(inner.writes)
        outer.write(memoryview(b"c"))
        await asyncio.sleep(0)
        return [after_first, inner.writes]

    after_first, after_second = asyncio.run(two_passes())
    assert after_first == [b"ab"]
    assert after_second == [b"ab", b"c"]
