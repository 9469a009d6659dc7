"""For bench/sandbox_bench.py `--parts http`: the sandbox processor in a process of its own, as a
split deployment runs it (`paycore processor serve` on a SQLite file, its webhooks to
`servers/webhook_receiver.py`), charged over HTTP by paycore's own client (`HttpTransport`,
kept-alive connections), `clients` threads for `seconds`: charges/s, and the processor's CPU
(/proc, every thread) per charge from the load's start until the last webhook is delivered, so
that each charge's webhook is in it. Checked: every charge `succeeded`, one webhook each,
delivered."""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import payments_bench as pb

DRAIN_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 30.0


def _counts(sandbox_db: Path) -> tuple[int, dict[str, int]]:
    with sqlite3.connect(f"file:{sandbox_db}?mode=ro", uri=True, timeout=10) as connection:
        charges = int(connection.execute("SELECT COUNT(*) FROM sandbox_charges").fetchone()[0])
        states = dict(connection.execute("SELECT state, COUNT(*) FROM sandbox_webhooks GROUP BY state").fetchall())
    return charges, states


def _charges(base_url: str, clients: int, seconds: float, tag: str) -> tuple[int, list[str]]:
    """Charges from `clients` threads for `seconds`; (succeeded, problems)."""
    from paycore.processor.http_transport import HttpTransport
    from paycore.processor.port import ChargeRequest

    transport = HttpTransport(base_url, timeout_ms=5_000)
    numbers = itertools.count()
    stop = time.perf_counter() + seconds
    succeeded: list[int] = []
    problems: list[str] = []

    def client() -> None:
        made = 0
        while time.perf_counter() < stop:
            number = next(numbers)
            try:
                result = transport.charge(ChargeRequest(f"{tag}-{number}", "m_bench", 1_000, "USD", "tok_ok"))
            except Exception as error:  # counted, never hidden
                problems.append(f"{type(error).__name__}: {error}")
                continue
            if result.status != "succeeded":
                problems.append(f"charge {number}: {result.status}")
            made += 1
        succeeded.append(made)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(succeeded), problems


def run(env: dict[str, str], workdir: Path, tag: str, receiver_url: str, args: Any, cpu_s: Any) -> dict[str, Any]:
    sandbox_db = workdir / f"sandbox-http-{tag}.db"
    port = pb.free_port()
    log = workdir / f"sandbox-http-{tag}.log"
    command = [*pb.paycore_command(), "processor", "serve", "--port", str(port), "--database-url",
               f"sqlite:///{sandbox_db}", "--webhook-url", receiver_url]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    try:
        pb.wait_ready(port, process, log, path="/v1/sandbox/faults", name="the sandbox processor")
        base_url = f"http://127.0.0.1:{port}"
        _charges(base_url, args.clients, args.warmup_s, f"{tag}-warm")
        _drained(sandbox_db)
        before = cpu_s(process.pid)
        made, problems = _charges(base_url, args.clients, args.seconds, tag)
        drain_s = _drained(sandbox_db)
        spent_s = cpu_s(process.pid) - before
        charges, states = _counts(sandbox_db)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
    check = "ok" if not problems and set(states) == {"delivered"} else f"{len(problems)} problems, {states}"
    return {
        "charges_per_s": made / args.seconds,
        "charges": made,
        "cpu_us_per_charge": 1e6 * spent_s / max(made, 1),
        "drain_s": drain_s,
        "stored_charges": charges,
        "check": check,
    }


def _drained(sandbox_db: Path) -> float:
    started = time.perf_counter()
    while True:
        _, states = _counts(sandbox_db)
        if not states.get("pending"):
            return time.perf_counter() - started
        if time.perf_counter() - started > DRAIN_TIMEOUT_S:
            raise RuntimeError(f"webhooks still queued after {DRAIN_TIMEOUT_S} s: {states}")
        time.sleep(0.02)
