"""Issue 18 point 1 (SPEC §3.2, ADR 0013) through the command line: `paycore serve` and
`paycore serve --dev` refuse (exit status 2) an unsafe bind of 0.0.0.0, ::, this machine's LAN
address or its hostname, and `--dev` serves the sandbox's API on a loopback bind only.
SQLite only: the rule does not depend on the database (the in-process tests run both).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from tests.support import secrets_keys
from tests.support.exposure import LAN, REAL_SECRET, UNSAFE_HOSTS, add_key, get

PAYCORE = Path(sys.executable).with_name("paycore")
CLI_TIMEOUT_S = 60
START_TIMEOUT_S = 30


# ---------------------------------------------------------------------------- paycore serve


def run_serve(database_url: str, *args: str, secret: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env["PAYCORE_DATABASE_URL"] = database_url
    env["PAYCORE_SANDBOX_DATABASE_URL"] = database_url.replace(".db", "-sandbox.db")
    env["PAYCORE_SECRETS_KEY"] = secrets_keys.TEXT  # needed once a key exists; the bind is under test
    if secret is not None:
        env["PAYCORE_PROCESSOR_WEBHOOK_SECRET"] = secret
    return subprocess.run(
        [str(PAYCORE), "serve", "--port", "0", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("dev", [False, True], ids=["serve", "serve-dev"])
@pytest.mark.parametrize("host", UNSAFE_HOSTS)
def test_serve_refuses_local_mode_off_loopback(host: str, dev: bool, tmp_path: Path) -> None:
    """SQLite only: the rule does not depend on the database (the in-process tests run both)."""
    result = run_serve(f"sqlite:///{tmp_path}/p.db", "--host", host, *(["--dev"] if dev else []), secret=REAL_SECRET)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert f"refusing to bind {host}" in output and "no API key exists yet" in output


@pytest.mark.parametrize("dev", [False, True], ids=["serve", "serve-dev"])
@pytest.mark.parametrize("host", UNSAFE_HOSTS)
def test_serve_refuses_the_default_secret_off_loopback(host: str, dev: bool, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/p.db"
    database = Database(Settings(database_url=url))
    migrate.upgrade_new(database)  # a new file of this test's own
    add_key(database)
    database.dispose()
    result = run_serve(url, "--host", host, *(["--dev"] if dev else []))
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert "PAYCORE_PROCESSOR_WEBHOOK_SECRET is the public development default" in output


@contextmanager
def serve_dev(tmp_path: Path, host: str, **env: str) -> Iterator[int]:
    """`paycore serve --dev --host HOST` on a free port, until the block ends."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    environment.update(PAYCORE_SANDBOX_DATABASE_URL=f"sqlite:///{tmp_path}/s.db", **env)
    environment["PAYCORE_SECRETS_KEY"] = secrets_keys.TEXT
    log_path = tmp_path / "serve.log"
    with log_path.open("w+") as log:
        command = [str(PAYCORE), "serve", "--dev", "--host", host, "--port", str(port)]
        process = subprocess.Popen(command, env=environment, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    assert get("127.0.0.1", port, "/healthz")[0] == 200
                    break
                except OSError:
                    assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
                    time.sleep(0.1)
            yield port
        finally:
            process.terminate()
            process.wait(10)


def test_serve_dev_does_not_mount_the_sandbox_off_loopback(tmp_path: Path) -> None:
    """With a key and a real secret `serve --dev` may bind 0.0.0.0, but without /sandbox."""
    url = f"sqlite:///{tmp_path}/p.db"
    database = Database(Settings(database_url=url))
    migrate.upgrade_new(database)  # a new file of this test's own
    add_key(database)
    database.dispose()
    with serve_dev(tmp_path, "0.0.0.0", PAYCORE_DATABASE_URL=url, PAYCORE_PROCESSOR_WEBHOOK_SECRET=REAL_SECRET) as port:
        for host in ["127.0.0.1", *([LAN] if LAN else [])]:
            status, body = get(host, port, "/sandbox/v1/sandbox/faults")
            assert status in (403, 404) and body["error"] in ("unsafe_exposure", "not_found"), (host, status, body)
    assert "not mounted" in " ".join((tmp_path / "serve.log").read_text().split())


def test_serve_dev_mounts_the_sandbox_on_loopback(tmp_path: Path) -> None:
    with serve_dev(tmp_path, "127.0.0.1", PAYCORE_DATABASE_URL=f"sqlite:///{tmp_path}/p.db") as port:
        assert get("127.0.0.1", port, "/sandbox/v1/sandbox/faults")[0] == 200


def test_serve_on_a_port_in_use_exits_1_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_serve(f"sqlite:///{tmp_path}/p.db", "--host", "127.0.0.1", "--port", str(port))
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1, output
    assert f"cannot bind 127.0.0.1:{port}" in output and "Traceback" not in output
