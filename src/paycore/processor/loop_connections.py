"""One exchange with the processor from the event loop (`http_transport.HttpTransport._exchange_on_loop`:
the charge, the capture, the cancel):
the request written and its answer read on a non-blocking socket through the running loop
(`sock_connect`, `sock_sendall`, `sock_recv`), parsed by httptools (the parser uvicorn serves
with), with no thread.

The rules are `http_transport`'s and `connections.py`'s, on the loop:
- an exchange is sent once and never again; the whole of it (connect, send, the answer) is
  bounded by the transport's `timeout_ms`, and anything short of a whole answer within it
  (a timeout, a refused or dropped connection, an answer cut off or unparsable) is a
  `ProcessorUnreachable`: the effect may have happened;
- an answer of more than `answer_bytes_max` bytes is read as no JSON (the caller's
  classification then says unreachable), and its connection closed;
- a connection whose answer was read whole and which the processor keeps open is kept, at most
  `IDLE_CONNECTIONS_MAX` of them, each taken again only within `IDLE_MS_MAX` of its last answer
  and only if the processor has not closed it or written to it unasked meanwhile
  (`connections.still_open`).

The kept connections are plain sockets, tied to no loop between exchanges (a test's clients
each run their own loop) and closed by the pool's finalizer, as the thread's pool closes its
own; a forked child never sends on its parent's.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import threading
import time
import weakref
from typing import Any, Final

import httptools

from paycore.processor import connections
from paycore.processor.connections import still_open
from paycore.processor.port import ProcessorUnreachable

READ_BYTES: Final = 65_536


class Answer:
    """What one exchange read: the status, the body (None when past the bound), and whether the
    connection may be kept."""

    __slots__ = ("body", "keep_alive", "status")

    def __init__(self, status: int, body: bytes | None, keep_alive: bool) -> None:
        self.status, self.body, self.keep_alive = status, body, keep_alive


class _Reading:
    """httptools' callbacks for one answer."""

    def __init__(self, answer_bytes_max: int) -> None:
        self.answer_bytes_max = answer_bytes_max
        self.chunks: list[bytes] = []
        self.size = 0
        self.headers_done = False
        self.length_known = False
        self.complete = False
        self.keep_alive = False
        self.parser: httptools.HttpResponseParser | None = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.length_known = True

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size <= self.answer_bytes_max:
            self.chunks.append(body)

    def on_message_complete(self) -> None:
        # Read here: once the message is done, the parser is reset for the next one.
        assert self.parser is not None
        self.complete, self.keep_alive = True, self.parser.should_keep_alive()


async def _read_answer(loop: asyncio.AbstractEventLoop, sock: socket.socket, answer_bytes_max: int) -> Answer:
    reading = _Reading(answer_bytes_max)
    parser = reading.parser = httptools.HttpResponseParser(reading)
    while not reading.complete:
        data = await loop.sock_recv(sock, READ_BYTES)
        if not data:
            if reading.headers_done and not reading.length_known and reading.size <= answer_bytes_max:
                # An answer with neither a length nor chunks ends where the connection ends.
                return Answer(parser.get_status_code(), b"".join(reading.chunks), False)
            raise ProcessorUnreachable("the processor closed the connection before its whole answer")
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as error:
            raise ProcessorUnreachable(f"the answer does not read as HTTP: {error}") from error
    fits = reading.size <= answer_bytes_max
    keep = fits and reading.keep_alive
    return Answer(parser.get_status_code(), b"".join(reading.chunks) if fits else None, keep)


class LoopConnections:
    """The kept-alive connections to one processor, for exchanges made from an event loop."""

    def __init__(self, host: str, port: int, answer_bytes_max: int) -> None:
        self._host, self._port, self._answer_bytes_max = host, port, answer_bytes_max
        self._lock = threading.Lock()  # loops of several threads may share the transport
        self._idle: list[tuple[socket.socket, float]] = []  # newest last; the finalizer holds this list
        self._pid = os.getpid()
        weakref.finalize(self, _close_all, self._idle)

    async def exchange(self, request: bytes, timeout_ms: int) -> Answer:
        """`request` (a whole HTTP/1.1 request) sent once, its answer read; within `timeout_ms`
        from now, or `ProcessorUnreachable`."""
        assert timeout_ms >= 1
        loop = asyncio.get_running_loop()
        sock: socket.socket | None = None
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                sock = self._take() or await self._connect(loop)
                await loop.sock_sendall(sock, request)
                answer = await _read_answer(loop, sock, self._answer_bytes_max)
        except (OSError, TimeoutError) as error:
            if sock is not None:
                sock.close()
            raise ProcessorUnreachable(f"{type(error).__name__}: {error}") from error
        except BaseException:
            if sock is not None:
                sock.close()  # cut off (unreadable, or cancelled): never sent on again
            raise
        self._keep(sock, answer.keep_alive)
        return answer

    def close(self) -> None:
        """Close the kept connections (a later exchange opens a new one)."""
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        _close_all(idle)

    def _take(self) -> socket.socket | None:
        oldest_s = time.monotonic() - connections.IDLE_MS_MAX / 1000
        stale: list[tuple[socket.socket, float]] = []
        taken = None
        with self._lock:
            if self._pid != os.getpid():  # inherited: the parent's too, never sent on here
                stale, self._pid = list(self._idle), os.getpid()
                self._idle.clear()
            while self._idle and taken is None:
                sock, idle_since_s = self._idle.pop()
                if idle_since_s >= oldest_s and still_open(sock):
                    taken = sock
                else:
                    stale.append((sock, idle_since_s))
        _close_all(stale)
        return taken

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        try:  # an address needs no lookup (the lookup is a thread's)
            family = socket.AF_INET6 if ipaddress.ip_address(self._host).version == 6 else socket.AF_INET
            address: Any = (self._host, self._port)
        except ValueError:
            [(family, _, _, _, address), *_] = await loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        return sock

    def _keep(self, sock: socket.socket, keep_alive: bool) -> None:
        if keep_alive:
            with self._lock:
                if self._pid == os.getpid() and len(self._idle) < connections.IDLE_CONNECTIONS_MAX:
                    self._idle.append((sock, time.monotonic()))
                    return
        sock.close()


def _close_all(idle: list[tuple[socket.socket, float]]) -> None:
    for sock, _ in idle:
        sock.close()
