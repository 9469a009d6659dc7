"""HTTP/1.1 spoken by hand over a socket to 127.0.0.1, for the tests of the HTTP edge (ADR
0013): heads and bodies no client library would send, refusals read as they arrive."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterable
from typing import Any

SOCKET_TIMEOUT_S = 10


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response (Content-Length framed, as all of ours are)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]


def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    with connect(port) as sock:
        sock.sendall(raw)
        return read_response(sock)


def send_until_answered(sock: socket.socket, pieces: Iterable[bytes]) -> int:
    """Send `pieces` one after the other until the server answers (or stops reading); return
    the bytes sent. A server that refuses early is not made to read the rest, and its answer is
    not lost to a reset caused by writing on after it closed."""
    sent = 0
    for piece in pieces:
        if select.select([sock], [], [], 0)[0]:
            break
        try:
            sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(piece)
    return sent


def assert_json_error(body: bytes, code: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(body)
    assert body == json.dumps(parsed, separators=(",", ":")).encode(), body  # compact, like every other error
    assert parsed["error"] == code and isinstance(parsed["message"], str), parsed
    return parsed


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return False
