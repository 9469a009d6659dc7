"""Helpers for the end-to-end tests: real servers (in-process or `paycore serve` OS processes),
a small stdlib HTTP client, and the `paycore` command line. Every wait here is bounded.

Money is integer minor units throughout: no float ever holds an amount, in the tests either.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from paycore.db.engine import Database
from paycore.ledger.verify import verify
from tests.support import secrets_keys

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUEST_TIMEOUT_S = 30
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10
CLI_TIMEOUT_S = 60
LOG_TAIL_CHARS = 4_000  # of a server's log, in a failure's message
# A few connections per server process, so that 4 servers stay well inside PostgreSQL's
# max_connections even when other test runs share the server.
SERVER_POOL_SIZE = 8


def paycore_command() -> list[str]:
    """The installed `paycore` console script next to this interpreter, else the module."""
    script = Path(sys.executable).with_name("paycore")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from paycore.cli.main import main; main()"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env["PAYCORE_DATABASE_URL"] = database_url
    env["PAYCORE_DB_POOL_SIZE"] = str(SERVER_POOL_SIZE)
    env["PYTHONUNBUFFERED"] = "1"
    env["PAYCORE_SECRETS_KEY"] = secrets_keys.TEXT  # the test's own app and its processes share it
    # One process per `paycore serve`, as the tests count, kill -9 and restart them (PostgreSQL's
    # default is one per core: tests/integration/http/test_serve_workers_cli.py runs several).
    env["PAYCORE_SERVE_WORKERS"] = "1"
    env.update(extra)
    return env


# ---------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def error(self) -> str | None:
        return self.body.get("error") if isinstance(self.body, dict) else None


def call(
    port: int,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> Reply:
    """One request on a fresh connection. Connection errors propagate (OSError)."""
    connection = HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        sent_headers = dict(headers or {})
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            sent_headers["Content-Type"] = "application/json"
        connection.request(method, path, body=payload, headers=sent_headers)
        response = connection.getresponse()
        raw = response.read()
        # parse_float: a float anywhere in a response is a bug we want to see, not round.
        data = json.loads(raw.decode() or "null", parse_float=_no_float) if raw else None
        return Reply(response.status, data, {name.lower(): value for name, value in response.getheaders()})
    finally:
        connection.close()


def _no_float(text: str) -> Any:
    raise AssertionError(f"a JSON float {text!r} in a response: money is integers only")


def credit_balance(port: int, tenant: str) -> int:
    reply = call(port, "GET", f"/v1/tenants/{tenant}/balance")
    assert reply.status == 200, reply
    assert reply.body["currency"] == "USD", reply
    amount_minor = reply.body["amount_minor"]
    assert type(amount_minor) is int, reply
    return amount_minor


def account_balance(port: int, tenant: str, account_id: str) -> dict[str, int]:
    reply = call(port, "GET", f"/v1/accounts/{account_id}/balance", headers={"Paycore-Tenant": tenant})
    assert reply.status == 200, reply
    balance = {name: reply.body[name] for name in ("posted_minor", "pending_minor", "available_minor")}
    assert all(type(value) is int for value in balance.values()), reply
    return balance


def account_entries(port: int, tenant: str, account_id: str) -> list[dict[str, Any]]:
    """Every entry of an account, following the cursor (bounded: 1000 pages)."""
    entries: list[dict[str, Any]] = []
    cursor = ""
    for _ in range(1000):
        path = f"/v1/accounts/{account_id}/entries?limit=100" + (f"&starting_after={cursor}" if cursor else "")
        reply = call(port, "GET", path, headers={"Paycore-Tenant": tenant})
        assert reply.status == 200, reply
        entries.extend(reply.body["data"])
        if not reply.body["has_more"]:
            return entries
        cursor = reply.body["data"][-1]["id"]
    raise AssertionError("more than 1000 pages of entries")


def create_account(port: int, tenant: str, code: str, *, normal_balance: str, no_overdraft: bool) -> str:
    body = {"code": code, "currency": "USD", "normal_balance": normal_balance, "no_overdraft": no_overdraft}
    reply = call(port, "POST", "/v1/accounts", body, headers={"Paycore-Tenant": tenant})
    assert reply.status == 201, reply
    return str(reply.body["id"])


def transfer(port: int, tenant: str, key: str, debit: str, credit: str, amount_minor: int) -> Reply:
    body = {"debit_account_id": debit, "credit_account_id": credit, "amount_minor": amount_minor, "currency": "USD"}
    return call(port, "POST", "/v1/transfers", body, headers={"Paycore-Tenant": tenant, "Idempotency-Key": key})


def credit_body(key: str, amount_minor: int, desc: str = "e2e") -> dict[str, Any]:
    return {"idempotency_key": key, "lines": [{"desc": desc, "amount_minor": amount_minor, "currency": "USD"}]}


def run_together(count: int, work: Callable[[int], Any], *, timeout_s: float = 60) -> list[Any]:
    """Run work(0..count-1) on `count` threads released at once by a barrier; return the
    results in index order (an exception is returned in place of its result)."""
    barrier = threading.Barrier(count, timeout=timeout_s)
    results: list[Any] = [None] * count

    def body(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except BaseException as error:  # reported to the test, never swallowed
            results[index] = error

    threads = [threading.Thread(target=body, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(thread.is_alive() for thread in threads)
    assert stuck == 0, f"{stuck} of {count} request threads still running after {timeout_s} s"
    return results


# ---------------------------------------------------------------------------- servers


@dataclass
class ServerProcess:
    """One `paycore serve` OS process on a free port, logging to a file."""

    env: dict[str, str]
    log_path: Path
    args: tuple[str, ...] = ()  # more `paycore serve` options, e.g. ("--dev",)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _log: Any = field(default=None, repr=False)

    def launch(self) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.port = free_port()
        self.starts += 1
        self._close_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        self._log.write(f"\n=== start {self.starts} on port {self.port}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            [*paycore_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port), *self.args],
            env=self.env,
            cwd=self.log_path.parent,  # a stray ./paycore.db would land in tmp, never in the repo
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, deadline: float) -> bool:
        """True once /healthz answers 200; False if the process exited (e.g. port taken)."""
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if call(self.port, "GET", "/healthz", timeout_s=1).status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"paycore serve not ready within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def kill9(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        self._close_log()

    def log(self) -> str:
        """The server's whole log so far: a line looked for is never cut off by the lines written
        after it (a loaded machine's health checks pushed one out of a 4,000-character tail)."""
        if self._log is not None:
            self._log.flush()
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        """The log's end, for a failure's message."""
        return self.log()[-chars:]

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


StartServers = Callable[..., list[ServerProcess]]  # the `serve_processes` fixture's type


def start_all(servers: Sequence[ServerProcess], *, attempts: int = 3) -> None:
    """Launch every server at once and wait until all answer /healthz. A server that exits
    before it is ready (another process took its port) is relaunched on a new port."""
    pending = list(servers)
    for server in pending:
        server.launch()
    deadline = time.monotonic() + START_TIMEOUT_S
    for _ in range(attempts):
        failed = [server for server in pending if not server.wait_ready(deadline)]
        if not failed:
            return
        for server in failed:
            server.launch()
        pending = failed
    raise AssertionError("paycore serve exited before it was ready:\n" + "\n".join(s.log_tail() for s in pending))


def ledger_verify(database_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*paycore_command(), "ledger", "verify"],
        env=server_env(database_url),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def assert_ledger_verifies_in_process(database: Database) -> None:
    """The same checks as `paycore ledger verify`, without paying for a CLI start-up."""
    with database.read() as connection:
        report = verify(connection)
    assert report.ok, report.problems


def assert_ledger_verifies(database_url: str) -> None:
    """`paycore ledger verify` as an operator runs it: its own OS process, exit status 0."""
    result = ledger_verify(database_url)
    assert result.returncode == 0, f"paycore ledger verify exited {result.returncode}:\n{result.stdout}{result.stderr}"
    assert "ledger verified" in result.stdout, result.stdout


def sandbox_rows(database_path: Path, table: str) -> list[dict[str, Any]]:
    """Every row of one of the sandbox processor's tables, read from its SQLite file (read-only)."""
    connection = sqlite3.connect(f"file:{database_path}?mode=ro", uri=True, timeout=10)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in connection.execute(f"SELECT * FROM {table}")]
    finally:
        connection.close()
