"""A client that hangs up before its request body is read (it declared 1000 bytes, sent 10 and
closed) is the client's doing, not the server's: one INFO line `client_disconnected`, status
499 in the access line and the latency histogram, no ERROR, no traceback, no 5xx counted. Over
a raw socket to a real server: no client library sends less than it declares."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from tests.support.raw_http import connect
from tests.support.servers import serve_in_thread

WAIT_S = 10


@pytest.fixture
def served(settings: Settings, database: Database) -> Iterator[tuple[FastAPI, int]]:
    migrate.upgrade(database)
    app = create_app(settings, database)
    with serve_in_thread(app) as url:
        yield app, int(url.rsplit(":", 1)[1])


def _hang_up_mid_body(port: int, path: str, content_type: bytes) -> None:
    with connect(port) as sock:
        sock.sendall(
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + content_type + b"\r\n"
            b"Idempotency-Key: hung-up\r\nContent-Length: 1000\r\n\r\n0123456789"
        )
        time.sleep(0.1)  # the head is read and the handler waits for the rest of the body


def _access_line(caplog: pytest.LogCaptureFixture, route: str) -> logging.LogRecord:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = [
            r
            for r in caplog.records
            if getattr(r, "event", None) == "http_request" and getattr(r, "route", None) == route
        ]
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no access line for {route}: {[r.getMessage() for r in caplog.records]}")


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/v1/payments", b"application/json"),
        ("/v1/transfers", b"application/json"),
        ("/v1/webhooks/processor", b"application/json"),
        ("/ops/login", b"application/x-www-form-urlencoded"),
    ],
)
def test_a_client_that_hangs_up_mid_body_is_logged_as_such_and_not_counted_as_a_5xx(
    served: tuple[FastAPI, int], caplog: pytest.LogCaptureFixture, path: str, content_type: bytes
) -> None:
    app, port = served
    caplog.set_level(logging.INFO)
    _hang_up_mid_body(port, path, content_type)
    line = _access_line(caplog, path)
    assert getattr(line, "status", None) == 499, line.getMessage()
    time.sleep(0.2)  # anything the server would log after the answer (uvicorn's own error line)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
    [disconnected] = [r for r in caplog.records if getattr(r, "event", None) == "client_disconnected"]
    assert (disconnected.levelno, getattr(disconnected, "route", None)) == (logging.INFO, path), (
        disconnected.getMessage()
    )
    metrics = app.state.metrics.render().decode()
    counted = [m for m in metrics.splitlines() if m.startswith("paycore_http_request_duration_seconds_count{")]
    assert [m for m in counted if f'route="{path}"' in m] == [
        f'paycore_http_request_duration_seconds_count{{method="POST",route="{path}",status="499"}} 1.0'
    ], counted
    assert not [m for m in counted if 'status="5' in m], counted
