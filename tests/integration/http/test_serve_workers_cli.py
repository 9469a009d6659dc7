"""`paycore serve --workers N` (issue 39 point 4, ADR 0028), as real processes on SQLite and on
PostgreSQL: the parent binds once and N API processes serve on its socket; every one of them
answers; one Idempotency-Key raced over connections held by different processes moves the
money once; a child killed with SIGKILL is started again, and too many deaths in the window
stop everything (the give-up rule); SIGTERM stops all, exit status 0; a killed parent leaves
no child behind; bad `--workers` values are refused before anything starts.

Which process answers is read from the kernel, not from paycore (no endpoint tells it): the
connections each child holds, from /proc (Linux)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Collection, Iterator
from http.client import HTTPConnection
from pathlib import Path

import pytest

from paycore.config import SERVE_RESTARTS_MAX, SERVE_WORKERS_MAX, cores_usable
from tests.e2e.support import (
    CLI_TIMEOUT_S,
    ServerProcess,
    call,
    credit_balance,
    credit_body,
    paycore_command,
    run_together,
    server_env,
    start_all,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc"),
]
WORKERS = 2
WAIT_S = 20
CONNECTIONS_MAX = 200  # opened one by one until every child holds `HELD_EACH_MIN` of them
HELD_EACH_MIN = 3


# ---------------------------------------------------------------------------- processes, from /proc


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, parent = text.rsplit(")", 1)[1].split()[:2]
    return state, int(parent)


def children(pid: int) -> set[int]:
    """The live (not zombie) children of `pid`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == pid and stat[0] != "Z":
                found.add(int(entry.name))
    return found


def wait_children(pid: int, count: int, *, other_than: Collection[int] = ()) -> set[int]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = children(pid)
        if len(found) == count and found.isdisjoint(other_than):
            return found
        time.sleep(0.05)
    raise AssertionError(f"{pid} has children {children(pid)}, not {count} new ones")


def gone(pid: int) -> bool:
    stat = _stat(pid)
    return stat is None or stat[0] == "Z"


def wait_gone(pids: set[int]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not all(gone(pid) for pid in pids):
        time.sleep(0.05)
    assert all(gone(pid) for pid in pids), [pid for pid in pids if not gone(pid)]


def connections_held(pid: int, port: int) -> int:
    """Established TCP connections on local port `port` whose socket `pid` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    held = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        if local_port == port and fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
            held += 1
    return held


# ---------------------------------------------------------------------------- helpers


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(server_env(database_url), tmp_path / "serve.log", args=("--workers", str(WORKERS)))
    start_all([server])
    yield server
    server.stop()
    print(server.log())


def held_connections(port: int, pids: set[int]) -> list[HTTPConnection]:
    """Kept-alive connections, each having had an answer, until every child holds some."""
    connections: list[HTTPConnection] = []
    while len(connections) < CONNECTIONS_MAX:
        connection = HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
        connection.request("GET", "/healthz")
        assert connection.getresponse().read() == b'{"status":"ok"}'
        connections.append(connection)
        if all(connections_held(pid, port) >= HELD_EACH_MIN for pid in pids):
            return connections
    for connection in connections:
        connection.close()
    held = {pid: connections_held(pid, port) for pid in pids}
    raise AssertionError(f"{CONNECTIONS_MAX} connections, held by the children as {held}")


def credit_on(connection: HTTPConnection, key: str) -> tuple[int, bytes, str | None]:
    body = json.dumps(credit_body(key, 2500))
    connection.request("POST", "/v1/tenants/spread/credits", body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, response.read(), response.getheader("Idempotent-Replayed")


def run_serve(database_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*paycore_command(), "serve", "--port", "0", *args],
        env={**server_env(database_url), **env},
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


# ---------------------------------------------------------------------------- the tests


def test_every_process_serves_and_one_key_moves_money_once(served: ServerProcess) -> None:
    assert served.process is not None
    pids = wait_children(served.process.pid, WORKERS)
    connections = held_connections(served.port, pids)
    try:
        # One key raced on every held connection: every child has some of them.
        results = run_together(len(connections), lambda index: credit_on(connections[index], "one-key"))
    finally:
        for connection in connections:
            connection.close()
    statuses = Counter(status for status, _, _ in results)
    assert statuses[201] == 1 and set(statuses) <= {200, 201}, statuses
    created = next(body for status, body, _ in results if status == 201)
    assert all(body == created for _, body, _ in results)
    assert all(replayed == "true" for status, _, replayed in results if status == 200)
    assert credit_balance(served.port, "spread") == 2500  # once, read by whichever process answers
    assert call(served.port, "GET", "/healthz").status == 200


def test_a_killed_child_is_restarted_and_sigterm_stops_all_with_status_0(served: ServerProcess) -> None:
    assert served.process is not None
    parent = served.process.pid
    first = wait_children(parent, WORKERS)
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    now = wait_children(parent, WORKERS, other_than={victim})
    assert first - {victim} <= now
    assert call(served.port, "GET", "/healthz").status == 200
    assert "api_process_restarted" in served.log()
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(WAIT_S) == 0, served.log()
    wait_gone(now)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the rule is the parent's alone
def test_the_give_up_rule_stops_all_and_exits_1(served: ServerProcess) -> None:
    assert served.process is not None
    parent = served.process.pid
    killed: set[int] = set()
    for _ in range(SERVE_RESTARTS_MAX + 1):  # one death more than the restarts allowed
        victim = next(iter(wait_children(parent, WORKERS, other_than=killed)))
        os.kill(victim, signal.SIGKILL)
        killed.add(victim)
    assert served.process.wait(WAIT_S) == 1, served.log()
    assert served.log().count("api_process_restarted") == SERVE_RESTARTS_MAX
    assert "serve_gave_up" in served.log()
    wait_gone(killed | children(parent))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the pipe does not depend on the database
def test_a_killed_parent_leaves_no_child(served: ServerProcess) -> None:
    assert served.process is not None
    pids = wait_children(served.process.pid, WORKERS)
    served.kill9()
    wait_gone(pids)
    assert "api_process_orphaned" in served.log()


def test_the_default_is_one_per_core_on_postgresql_and_one_on_sqlite(
    backend: str, database_url: str, tmp_path: Path
) -> None:
    env = server_env(database_url)
    del env["PAYCORE_SERVE_WORKERS"]
    server = ServerProcess(env, tmp_path / "serve.log")
    start_all([server])
    try:
        assert server.process is not None
        cores = min(cores_usable(), SERVE_WORKERS_MAX)
        expected = cores if backend == "postgres" and cores > 1 else 0  # 1: the parent serves itself
        if expected:
            wait_children(server.process.pid, expected)
        else:
            time.sleep(0.5)
            assert children(server.process.pid) == set(), server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # refused before the database is used
@pytest.mark.parametrize("value", ["0", "-1", str(SERVE_WORKERS_MAX + 1), "two"])
def test_bad_workers_values_are_refused(database_url: str, value: str) -> None:
    result = run_serve(database_url, f"--workers={value}")
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--workers'" in result.stderr


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("value", ["0", str(SERVE_WORKERS_MAX + 1), "two"])
def test_bad_serve_workers_settings_are_refused(database_url: str, value: str) -> None:
    result = run_serve(database_url, PAYCORE_SERVE_WORKERS=value)
    assert result.returncode == 1, result.stderr
    assert "start_refused" in result.stderr and "PAYCORE_SERVE_WORKERS" in result.stderr


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("how", ["flag", "setting"])
def test_dev_with_several_processes_is_refused(database_url: str, how: str) -> None:
    args, env = (["--workers", "2"], {}) if how == "flag" else ([], {"PAYCORE_SERVE_WORKERS": "2"})
    result = run_serve(database_url, "--dev", *args, **env)
    assert result.returncode == 2, result.stderr
    assert '"reason":"dev_workers"' in result.stderr.replace(" ", "")
    assert "paycore serve --workers N" in result.stderr


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_port_in_use_is_refused_before_any_child_starts(database_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_serve(database_url, "--workers", "2", "--host", "127.0.0.1", f"--port={port}")
    assert result.returncode == 1, result.stderr
    assert f"cannot bind 127.0.0.1:{port}" in result.stderr and "api_process_spawned" not in result.stderr


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_more_connections_than_postgresql_takes_is_a_warning(database_url: str, tmp_path: Path) -> None:
    """2 processes, each with a pool of more than half of max_connections: together over it."""
    import psycopg

    from tests.support.databases import ADMIN_URL

    with psycopg.connect(ADMIN_URL) as connection:
        connections_max = int(connection.execute("SHOW max_connections").fetchone()[0])  # type: ignore[index]
    pool_size = connections_max // WORKERS + 1
    env = server_env(database_url, PAYCORE_DB_POOL_SIZE=str(pool_size))
    server = ServerProcess(env, tmp_path / "serve.log", args=("--workers", str(WORKERS)))
    start_all([server])
    try:
        assert '"event":"serve_connections_over"' in server.log().replace(" ", "")
    finally:
        server.stop()
