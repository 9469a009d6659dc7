#!/usr/bin/env python3
"""A minimal in-memory credit server: the standard library's ThreadingHTTPServer, a dict and a lock.

The comparison point of issue 2 for `POST /v1/tenants/{id}/credits`: the same request and
response shapes as paycore (SPEC §5), the same idempotency rules (201 first, 200 replay with
the same body, 409 for the key with another body), but nothing is durable and there is no
framework. It is served the way the standard library serves by default:
`BaseHTTPRequestHandler` speaks HTTP/1.0, so the connection closes after every response
(load tools reconnect for each request), and `ThreadingHTTPServer` starts a thread per
connection with the default listen backlog. The one change from the defaults: the
per-request log line on stderr is off unless --log is given (a benchmark measures serving,
not a terminal).

    .venv/bin/python bench/servers/stdlib_credit_server.py --port 8001
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ROUTE = re.compile(r"^/v1/tenants/([A-Za-z0-9_.-]{1,64})/(credits|balance)$")
_AMOUNT_MAX = 2**53 - 1


class Store:
    """Every credit and balance, in memory, behind one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.credits: dict[tuple[str, str], tuple[str, str]] = {}  # (tenant, key) -> (fingerprint, body)
        self.balances: dict[str, int] = {}

    def credit(self, tenant: str, key: str, fingerprint: str, amount: int, lines: list[Any]) -> tuple[int, str]:
        with self.lock:
            existing = self.credits.get((tenant, key))
            if existing is not None:
                if existing[0] != fingerprint:
                    return 409, _error("idempotency_key_reused", "this idempotency key was already used")
                return 200, existing[1]
            body = json.dumps(
                {
                    "id": "cr_" + uuid.uuid4().hex,
                    "tenant_id": tenant,
                    "idempotency_key": key,
                    "currency": "USD",
                    "amount_minor": amount,
                    "lines": lines,
                    "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
                },
                separators=(",", ":"),
            )
            self.credits[(tenant, key)] = (fingerprint, body)
            self.balances[tenant] = self.balances.get(tenant, 0) + amount
            return 201, body

    def balance(self, tenant: str) -> int:
        with self.lock:
            return self.balances.get(tenant, 0)


def _error(code: str, message: str) -> str:
    return json.dumps({"error": code, "message": message}, separators=(",", ":"))


def _is_amount(value: object) -> bool:
    return type(value) is int and 0 < value <= _AMOUNT_MAX


def _parse_credit(raw: bytes) -> tuple[str, int, list[Any], str] | str:
    """(key, amount, lines, fingerprint), or an error code."""
    try:
        body = json.loads(raw)
    except ValueError:
        return "invalid_json"
    if not isinstance(body, dict):
        return "invalid_request"
    key = body.get("idempotency_key")
    if not isinstance(key, str) or not 1 <= len(key) <= 255:
        return "invalid_idempotency_key"
    lines = body.get("lines")
    if not isinstance(lines, list) or not lines:
        return "invalid_request"
    amount = 0
    for line in lines:
        if not isinstance(line, dict) or not isinstance(line.get("desc"), str):
            return "invalid_request"
        if not _is_amount(line.get("amount_minor")):
            return "invalid_amount"
        if line.get("currency") != "USD":
            return "unsupported_currency"
        amount += line["amount_minor"]
    if amount > _AMOUNT_MAX:
        return "invalid_amount"
    clean = [{"desc": line["desc"], "amount_minor": line["amount_minor"], "currency": "USD"} for line in lines]
    fingerprint = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return key, amount, clean, fingerprint


class Handler(BaseHTTPRequestHandler):
    store: Store  # set on the class by serve()
    log_requests = False

    def do_POST(self) -> None:
        match = _ROUTE.match(self.path)
        if match is None or match.group(2) != "credits":
            self._send(404, _error("not_found", "no such route"))
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1_048_576:
            self._send(413, _error("request_too_large", "request bodies are limited to 1048576 bytes"))
            return
        parsed = _parse_credit(self.rfile.read(length))
        if isinstance(parsed, str):
            self._send(400, _error(parsed, "the request is not a valid credit"))
            return
        key, amount, lines, fingerprint = parsed
        status, body = self.store.credit(match.group(1), key, fingerprint, amount, lines)
        self._send(status, body)

    def do_GET(self) -> None:
        match = _ROUTE.match(self.path)
        if match is None or match.group(2) != "balance":
            self._send(404, _error("not_found", "no such route"))
            return
        amount = self.store.balance(match.group(1))
        self._send(200, json.dumps({"currency": "USD", "amount_minor": amount}, separators=(",", ":")))

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        if self.log_requests:
            super().log_message(format, *args)


def serve(host: str, port: int, *, log: bool = False) -> ThreadingHTTPServer:
    handler = type("CreditHandler", (Handler,), {"store": Store(), "log_requests": log})
    return ThreadingHTTPServer((host, port), handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--log", action="store_true", help="log every request to stderr (the library default)")
    args = parser.parse_args()
    server = serve(args.host, args.port, log=args.log)
    print(f"stdlib credit server on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
