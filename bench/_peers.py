"""The peers of bench/run (bench/targets.py): where they are, how each is started, loaded and
driven. Nothing here measures paycore.

- the reference server: `../shared/peers/reference_http/server.py`, a stdlib ThreadingHTTPServer
  answering JSON from a dict (driven by payments_bench.drive, the client paycore's payments get);
- pgledger: `../shared/peers/pgledger/*.sql` loaded into a scratch database `bench_pgledger_*`,
  driven by client processes calling `pgledger_create_transfer` one transfer per call (autocommit);
- TigerBeetle 0.17.8: `../shared/peers/tigerbeetle/tigerbeetle` formatted and started on a data
  file on disk (never tmpfs) without `--development`, driven by `_tb_client.py` run in a
  throwaway virtualenv holding the `tigerbeetle==0.17.8` client (never paycore's dependencies).

`../shared` is relative to the repository root (CI copies shared/ beside the clone);
`PAYCORE_BENCH_PEERS` overrides it. A missing peer is skipped with the reason, never guessed.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as common

PEERS = Path(os.environ.get("PAYCORE_BENCH_PEERS", str(common.REPO.parent / "shared" / "peers")))
REFERENCE_SERVER = PEERS / "reference_http" / "server.py"
TIGERBEETLE_CLIENT = "tigerbeetle==0.17.8"  # must match the server binary's release
TB_VENV = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "paycore-bench" / "tb-0.17.8-venv"
START_TIMEOUT_S = 60
CLIENT_TIMEOUT_S = 600  # one peer run, whatever its size; past it the run is killed and reported failed
PGLEDGER_AMOUNT = 1  # numeric, whole units: pgledger has no minor-unit convention of its own


class PeerMissing(Exception):
    """The peer is not where issue 31 says it is: the figure is skipped with this reason."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def require(path: Path, what: str) -> Path:
    if not path.exists():
        raise PeerMissing(f"{what} not found at {path} (expected ../shared/peers beside the repository)")
    return path


def wait_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited at start-up with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Our own child, by its handle: SIGTERM, then SIGKILL after 20 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# ---------------------------------------------------------------------------- the reference server


def start_reference(log: Path) -> tuple[subprocess.Popen[bytes], int]:
    server = require(REFERENCE_SERVER, "the reference HTTP server")
    port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen([sys.executable, str(server), str(port)], stdout=sink, stderr=subprocess.STDOUT)
    wait_port(port, process, "the reference server")
    return process, port


# ---------------------------------------------------------------------------- pgledger


def load_pgledger(admin_url: str) -> str:
    """A scratch database `bench_pgledger_*` with pgledger loaded as its README says."""
    root = require(PEERS / "pgledger", "pgledger")
    files = [
        root / "vendor" / "scoville-pgsql-ulid" / "ulid-to-uuid.sql",
        root / "vendor" / "scoville-pgsql-ulid" / "uuid-to-ulid.sql",
        root / "pgledger.sql",
    ]
    for file in files:
        require(file, "pgledger")
    if shutil.which("psql") is None:
        raise PeerMissing("psql is not installed: pgledger's README loads it with psql")
    name = common.new_postgres_database(admin_url, "pgledger")
    command = [
        "psql",
        common.postgres_libpq_url(admin_url, name),
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "--single-transaction",
    ]
    for file in files:
        command += ["-f", str(file)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        common.drop_postgres_database(admin_url, name)
        raise RuntimeError(f"loading pgledger failed: {done.stderr[-800:]}")
    return name


def pgledger_accounts(libpq_url: str, clients: int, hot: bool, tag: str) -> list[tuple[str, str]]:
    """(from, to) per client: each its own pair, or all from one hot account."""
    import psycopg

    with psycopg.connect(libpq_url, autocommit=True) as connection:

        def account(name: str) -> str:
            row = connection.execute("SELECT id FROM pgledger_create_account(%s, 'USD')", (f"{tag}.{name}",)).fetchone()
            assert row is not None
            return str(row[0])

        if hot:
            source = account("hot")
            return [(source, account(f"dst{index}")) for index in range(clients)]
        return [(account(f"src{index}"), account(f"dst{index}")) for index in range(clients)]


def _pgledger_client(libpq_url: str, pair: tuple[str, str], start_at: float, duration_s: float, out: Any) -> None:
    import psycopg

    try:
        with psycopg.connect(libpq_url, autocommit=True, application_name="paycore-bench-pgledger") as connection:
            call = "SELECT id FROM pgledger_create_transfer(%s, %s, %s)"
            connection.execute(call, (*pair, PGLEDGER_AMOUNT))  # connected and warm before the clock
            total, in_window, end = 1, 0, start_at + duration_s
            while time.monotonic() < end:
                connection.execute(call, (*pair, PGLEDGER_AMOUNT))
                total += 1
                in_window += time.monotonic() >= start_at
            out.put(("ok", total, in_window))
    except Exception as error:
        out.put(("error", repr(error)[:500], 0))


def run_pgledger(libpq_url: str, clients: int, hot: bool, warmup_s: float, duration_s: float) -> dict[str, Any]:
    """Transfers/s of `clients` processes, one pgledger transfer per call; the books are checked:
    pgledger holds exactly the transfers the clients counted."""
    import psycopg

    tag = secrets.token_hex(3)
    pairs = pgledger_accounts(libpq_url, clients, hot, tag)
    context = mp.get_context("spawn")
    out = context.Queue()
    start_at = time.monotonic() + 3.0 + warmup_s  # time to spawn and connect, then the warm-up
    processes = [
        context.Process(target=_pgledger_client, args=(libpq_url, pair, start_at, duration_s, out), daemon=True)
        for pair in pairs
    ]
    for process in processes:
        process.start()
    results, problems = [], []
    try:
        for _ in processes:
            results.append(out.get(timeout=CLIENT_TIMEOUT_S))
    except queue.Empty:
        problems.append("timed out waiting for the pgledger clients")
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
    problems += [f"client failed: {detail}" for kind, detail, _ in results if kind != "ok"]
    counted = sum(int(total) for kind, total, _ in results if kind == "ok")
    with psycopg.connect(libpq_url, autocommit=True) as connection:
        accounts = sorted({account for pair in pairs for account in pair})
        row = connection.execute(
            "SELECT COUNT(*) FROM pgledger_transfers WHERE from_account_id = ANY(%s)", (accounts,)
        ).fetchone()
    stored = int(row[0]) if row else -1
    if not problems and stored != counted:
        problems.append(f"pgledger holds {stored} transfers, the clients counted {counted}")
    in_window = sum(int(window) for kind, _, window in results if kind == "ok")
    return {"per_s": in_window / duration_s, "problems": problems}


# ---------------------------------------------------------------------------- TigerBeetle


@dataclass
class TigerBeetle:
    process: subprocess.Popen[bytes]
    address: str
    data_file: Path
    python: Path

    def stop(self) -> None:
        stop(self.process)
        self.data_file.unlink(missing_ok=True)


def tigerbeetle_python() -> Path:
    """The throwaway virtualenv with the matching client, made once (pip from the usual index)."""
    python = TB_VENV / "bin" / "python"
    if not python.exists():
        print(f"installing {TIGERBEETLE_CLIENT} into {TB_VENV} (one time)", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(TB_VENV)], check=True, timeout=120)
        pip = [str(python), "-m", "pip", "install", "-q", TIGERBEETLE_CLIENT]
        done = subprocess.run(pip, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            shutil.rmtree(TB_VENV, ignore_errors=True)
            raise PeerMissing(f"pip could not install {TIGERBEETLE_CLIENT}: {done.stderr[-400:]}")
    return python


def start_tigerbeetle(workdir: Path, log: Path) -> TigerBeetle:
    binary = require(PEERS / "tigerbeetle" / "tigerbeetle", "the TigerBeetle binary")
    filesystem = common.filesystem_of(workdir)
    if filesystem.startswith("tmpfs"):
        raise PeerMissing(f"{workdir} is on {filesystem}: TigerBeetle's batched rate needs a disk (Direct I/O)")
    python = tigerbeetle_python()
    data_file = workdir / "0_0.tigerbeetle"
    formatting = [str(binary), "format", "--cluster=0", "--replica=0", "--replica-count=1", str(data_file)]
    done = subprocess.run(formatting, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tigerbeetle format failed: {done.stderr[-800:]}")
    port = free_port()
    with log.open("wb") as sink:
        command = [str(binary), "start", f"--addresses=127.0.0.1:{port}", str(data_file)]  # no --development
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_port(port, process, "TigerBeetle")
    except BaseException:
        stop(process)
        data_file.unlink(missing_ok=True)
        raise
    return TigerBeetle(process, f"127.0.0.1:{port}", data_file, python)


def run_tigerbeetle(server: TigerBeetle, batch: int, duration_s: float) -> dict[str, Any]:
    """Transfers/s of one client sending batches of `batch` transfers (bench/_tb_client.py)."""
    script = Path(__file__).resolve().parent / "_tb_client.py"
    command = [str(server.python), str(script), server.address, str(batch), str(duration_s)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        return {"per_s": None, "problems": [f"TigerBeetle client failed: {done.stderr[-600:]}"]}
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found
