"""A webhook receiver for bench/sandbox_bench.py: answers every POST 200 at once, keeps
connections alive (HTTP/1.1), and counts the TCP connections it accepted and the requests it
answered (`GET /stats`). Standard library only, so it costs the same whatever code is measured.

    .venv/bin/python bench/servers/webhook_receiver.py --port 0   # prints `PORT <n>` when ready
"""

from __future__ import annotations

import argparse
import http.server
import json
import socketserver
import threading
from typing import Any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, Handler)
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.connections += 1
        super().process_request(request, client_address)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The answer's headers and body are two writes: without this, on a kept-alive connection
    # the body waits for the client's delayed ACK of the headers (40 ms), as any server that
    # writes twice and leaves Nagle's algorithm on would make it wait.
    disable_nagle_algorithm = True
    server: Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.requests += 1
        self._send(b'{"received":true}')

    def do_GET(self) -> None:
        with self.server.lock:
            stats = {"connections": self.server.connections, "requests": self.server.requests}
        self.close_connection = True
        self._send(json.dumps(stats).encode())

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    socketserver.TCPServer.allow_reuse_address = True
    server = Server(("127.0.0.1", args.port))
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.05)  # until terminated


if __name__ == "__main__":
    main()
