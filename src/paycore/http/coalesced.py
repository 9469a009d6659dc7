"""A connection's writes of one event-loop pass sent together: one `send` a response.

uvicorn's httptools protocol writes a response's status line and headers, then its body, each
with its own `transport.write`; asyncio sends each at once, so every answer costs two `send`
system calls, and on loopback each is the receiving side's work too (measured: uvicorn's two
writes were 15% of the API process's samples under a payment load, docs/benchmarks.md).
`CoalescedWrites` stands between the protocol and its transport: what is written during one
pass of the loop is kept and handed to the transport as one write at the end of that pass
(`call_soon`), or before anything that must follow it (close, EOF, a protocol switch).
Nothing is reordered, dropped or held past the pass that wrote it.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescedWrites(asyncio.Transport):
    """`transport`, its writes of one loop pass joined into one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """What is kept, to the transport now (a no-op when nothing is)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if self._transport.is_closing():
            return  # as the transport itself drops a write once closing
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.flush()
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(data) for data in self._pending)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()
