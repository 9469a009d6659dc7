"""Shared by the bind-safety tests (issue 18 point 1): this machine's unsafe bind addresses,
and small HTTP helpers. Traffic goes only to this machine's own addresses."""

from __future__ import annotations

import json
import socket
import subprocess
from http.client import HTTPConnection
from typing import Any

import pytest

from paycore.db.engine import Database
from paycore.http.exposure import is_loopback
from paycore.kit.clock import now_us
from paycore.kit.signing import SIGNATURE_HEADER, sign
from paycore.tenants import service as tenants

REAL_SECRET = "whsec_test_not_the_default"


def lan_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, or None when it has only loopback."""
    candidates: list[str] = []
    try:
        shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=5)
        for line in shown.stdout.splitlines():
            fields = line.split()
            if "inet" in fields:
                candidates.append(fields[fields.index("inet") + 1].split("/")[0])
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            candidates.append(str(info[4][0]))
    except OSError:
        pass
    for address in candidates:
        if not is_loopback(address):
            return address
    return None


LAN = lan_address()
needs_lan = pytest.mark.skipif(LAN is None, reason="this machine has no non-loopback address to bind")
HOSTNAME = socket.gethostname()
# A LAN address and a hostname are refused whatever they resolve to; 0.0.0.0 and :: bind everything.
UNSAFE_HOSTS = ["0.0.0.0", "::", HOSTNAME, *([LAN] if LAN else [])]


def add_key(database: Database) -> str:
    return database.transaction(lambda c: tenants.create_tenant(c, "acme", now_us=now_us())).api_key


def get(host: str, port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    connection = HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None
    finally:
        connection.close()


def post_webhook(host: str, port: int, secret: str) -> tuple[int, Any]:
    body = json.dumps({"id": "evt_forged", "type": "charge.succeeded", "data": {}}).encode()
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(secret, now_us() // 1_000_000, body)}
    connection = HTTPConnection(host, port, timeout=10)
    try:
        connection.request("POST", "/v1/webhooks/processor", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()
