"""Helpers for the payments end-to-end tests: the sandbox processor and `paycore worker` as
real OS processes, and reads of a payment's row and of the sandbox's own SQLite file. Every
wait here is bounded.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select

from paycore.db.engine import Database
from paycore.payments.models import payments
from tests.e2e.support import START_TIMEOUT_S, STOP_TIMEOUT_S, call, free_port, paycore_command
from tests.support import secrets_keys

T = TypeVar("T")
POLL_S = 0.05
LAUNCH_ATTEMPTS_MAX = 3  # a free port can be taken by another process before ours binds it


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any PAYCORE_* variable (the test decides them all), plus `extra`;
    the tests' secrets key, so that the processes open what the test's own app sealed."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PAYCORE_SECRETS_KEY"] = secrets_keys.TEXT
    env["PAYCORE_SERVE_WORKERS"] = "1"  # one process per `paycore serve`, as the tests count and kill them
    env.update(extra)
    return env


@dataclass
class CliProcess:
    """One `paycore ...` OS process, logging to a file."""

    args: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    _log: Any = field(default=None, repr=False)

    def launch(self) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self._close_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log.write(f"\n=== paycore {' '.join(self.args)}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            [*paycore_command(), *self.args],
            env=self.env,
            cwd=self.log_path.parent,  # a stray default database lands in tmp, never in the repo
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> int:
        """SIGKILL: no shutdown, no cleanup, its connections just die. Returns the exit status."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        return self.process.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        if self.running():
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        self._close_log()

    def log(self) -> str:
        if self._log is not None:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class SandboxProcess:
    """`paycore processor serve` on a free port, with its own SQLite file. Its webhooks go to
    `webhook_url` (a port nobody listens on, when a test wants only the resolver to decide)."""

    database_path: Path
    webhook_url: str
    log_path: Path
    port: int = 0
    cli: CliProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        for _ in range(LAUNCH_ATTEMPTS_MAX):
            self.port = free_port()
            self.cli = CliProcess(
                [
                    "processor",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--database-url",
                    f"sqlite:///{self.database_path}",
                    "--webhook-url",
                    self.webhook_url,
                ],
                clean_env(),
                self.log_path,
            )
            self.cli.launch()
            if self._wait_ready(time.monotonic() + START_TIMEOUT_S):
                return
        raise AssertionError(f"the sandbox processor exited before it was ready:\n{self.log()}")

    def _wait_ready(self, deadline: float) -> bool:
        """True once /healthz answers 200; False if the process exited (e.g. its port was taken)."""
        assert self.cli is not None
        while time.monotonic() < deadline:
            if not self.cli.running():
                return False
            try:
                if call(self.port, "GET", "/healthz", timeout_s=1).status == 200:
                    return True
            except OSError:
                pass
            time.sleep(POLL_S)
        raise AssertionError(f"the sandbox processor was not ready within {START_TIMEOUT_S} s:\n{self.log()}")

    def set_faults(self, plan: dict[str, Any]) -> dict[str, Any]:
        reply = call(self.port, "PUT", "/v1/sandbox/faults", plan)
        assert reply.status == 200, reply
        return dict(reply.body)

    def faults(self) -> dict[str, Any]:
        reply = call(self.port, "GET", "/v1/sandbox/faults")
        assert reply.status == 200, reply
        return dict(reply.body)

    def clear_faults(self) -> None:
        reply = call(self.port, "DELETE", "/v1/sandbox/faults")
        assert reply.status == 200 and reply.body["active"] is False, reply

    def charge_rows(self) -> list[dict[str, Any]]:
        """Every charge the sandbox stored, read from its SQLite file (read-only)."""
        connection = sqlite3.connect(f"file:{self.database_path}?mode=ro", uri=True, timeout=10)
        connection.row_factory = sqlite3.Row
        try:
            rows = connection.execute("SELECT * FROM sandbox_charges ORDER BY created_at_us").fetchall()
        finally:
            connection.close()
        return [dict(row) for row in rows]

    def stop(self) -> None:
        if self.cli is not None:
            self.cli.stop()

    def log(self) -> str:
        return self.cli.log() if self.cli is not None else ""


def payment_row(database: Database, payment_id: str) -> dict[str, Any]:
    with database.read() as connection:
        row = connection.execute(select(payments).where(payments.c.id == payment_id)).mappings().one()
    return dict(row)


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float, on_timeout: Callable[[], str]) -> T:
    """Poll `probe` until it returns something other than None (bounded by `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}\n{on_timeout()}")
        time.sleep(POLL_S)
