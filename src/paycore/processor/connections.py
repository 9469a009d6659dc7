"""The processor transport's kept-alive connections (`http_transport.HttpTransport`).

A call opened a connection of its own and closed it after the answer: a TCP handshake and a
close a payment in the API process and in the processor's. Now an exchange whose answer was
read whole, on a connection the processor keeps open (no `Connection: close` in its answer),
leaves the connection here, and the next exchange takes it back.

What a call may claim is unchanged: an exchange is sent once and never again. A kept
connection is taken only if it has been idle for less than `IDLE_MS_MAX` (a fifth of the
keep-alive idle time `paycore serve` and `paycore processor serve` give a connection,
PAYCORE_HTTP_KEEPALIVE_IDLE_MS, 5 s by default) and the processor has not closed it meanwhile
(nothing to read on it: a closed connection reads as an end of file); otherwise it is closed
and a new connection made. A failure on a kept connection after the request was sent is a
failure of the call (`ProcessorUnreachable`: the effect may have happened), exactly as on a
new connection, and the connection is closed.

Connections are this process's: a child process that inherited a pool (a fork) never sends on
the parent's connections; it closes its copies (the parent's stay open) and starts afresh.
"""

from __future__ import annotations

import http.client
import os
import select
import socket
import threading
import time
import weakref
from typing import Final

IDLE_MS_MAX: Final = 1_000
IDLE_CONNECTIONS_MAX: Final = 16  # more at once are closed after their answer, as before


class ConnectionPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (connection, idle since), newest last; always this one list, which the finalizer holds
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._pid = os.getpid()
        # A pool let go of (a test's transport, a command's) closes what it kept, as a transport
        # that kept nothing left nothing open; even inside a cycle of garbage, since the list is
        # held from here and not part of it.
        weakref.finalize(self, _close_all, self._idle)

    def take(self) -> http.client.HTTPConnection | None:
        """A kept connection fit to send on, or None (make a new one)."""
        oldest_s = time.monotonic() - IDLE_MS_MAX / 1000
        stale: list[http.client.HTTPConnection] = []
        taken = None
        with self._lock:
            if self._pid != os.getpid():  # inherited: the parent's too, never sent on here
                stale = [connection for connection, _ in self._idle]
                self._idle.clear()
                self._pid = os.getpid()
            while self._idle and taken is None:
                connection, idle_since_s = self._idle.pop()
                if idle_since_s >= oldest_s and _still_open(connection):
                    taken = connection
                else:
                    stale.append(connection)
        for connection in stale:
            connection.close()
        return taken

    def keep(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """After an exchange: keep `connection` if its answer was read whole and the processor
        keeps it open; else close it."""
        if response.will_close or not response.isclosed() or connection.sock is None:
            connection.close()
            return
        with self._lock:
            if self._pid == os.getpid() and len(self._idle) < IDLE_CONNECTIONS_MAX:
                self._idle.append((connection, time.monotonic()))
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        _close_all(idle)


def _close_all(idle: list[tuple[http.client.HTTPConnection, float]]) -> None:
    for connection, _ in idle:
        connection.close()


def _still_open(connection: http.client.HTTPConnection) -> bool:
    return still_open(connection.sock)


def still_open(sock: socket.socket | None) -> bool:
    """Nothing is waiting to be read on the connection: an idle HTTP/1.1 connection the
    processor closed (or wrote to unasked) reads as ready."""
    if sock is None:
        return False
    poller = select.poll()  # not select(): a descriptor past 1023 is out of its range
    try:
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False
