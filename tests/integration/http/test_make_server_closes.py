"""`app.make_server` (SPEC §5) closes what it opens: once `shutdown()` returns (or
`server_close()` does), no connection of its database is left open, not in this process and
not at the server (PostgreSQL's `pg_stat_activity`), and no thread it started is left running.
An open pool was found when the server was collected, as a ResourceWarning, which the
`filterwarnings = error` of the shared contract tests turns into a failed test."""

from __future__ import annotations

import gc
import json
import os
import threading
from http.client import HTTPConnection
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.support import databases, secrets_keys

BODY = {"idempotency_key": "k1", "lines": [{"desc": "bonus", "amount_minor": 199, "currency": "USD"}]}
JOIN_TIMEOUT_S = 10


def open_connections(database_url: str) -> int:
    """Connections to the database: at the server (PostgreSQL), or file descriptors of this
    process on the SQLite file and its -wal and -shm files."""
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        with psycopg.connect(databases.ADMIN_URL, autocommit=True) as admin:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [url.database]).fetchone()
        assert row is not None
        return int(row[0])
    path = str(Path(str(url.database)).resolve())
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if _target(fd).startswith(path))


def _target(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile (the listing's own descriptor)
        return ""


def credit(port: int) -> int:
    connection = HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/v1/tenants/acme/credits", json.dumps(BODY), {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.fixture
def make_server_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PAYCORE_DATABASE_URL", database_url)
    monkeypatch.setenv("PAYCORE_SECRETS_KEY", secrets_keys.TEXT)  # no local key file in the working directory
    return database_url


def test_shutdown_closes_the_database_and_stops_its_threads(make_server_env: str) -> None:
    import app

    threads_before = set(threading.enumerate())
    server = app.make_server(host="127.0.0.1", port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    assert credit(server.server_address[1]) == 201
    assert open_connections(make_server_env) > 0  # what is measured below is there while it serves

    server.shutdown()  # the contract's one call; no server_close

    thread.join(JOIN_TIMEOUT_S)
    assert open_connections(make_server_env) == 0
    left = [t.name for t in set(threading.enumerate()) - threads_before if t.is_alive()]
    assert left == []
    del server
    gc.collect()  # an open pooled connection collected here is a ResourceWarning: an error in this suite


def test_server_close_of_a_server_never_served_closes_the_database(make_server_env: str) -> None:
    import app

    server = app.make_server(host="127.0.0.1", port=0)
    assert open_connections(make_server_env) > 0  # make_server migrated the database through the pool
    server.server_close()
    server.server_close()  # twice: nothing more to release, no error
    assert open_connections(make_server_env) == 0
    del server
    gc.collect()
