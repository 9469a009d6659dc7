"""The sandbox processor's own cost, an older commit beside this checkout, alternated in one run.

    git archive OLD_REV src | tar -x -C /tmp/sandbox-old      # the older code, without a worktree
    .venv/bin/python bench/sandbox_bench.py --old-src /tmp/sandbox-old/src [--rounds 2] [--seconds 10]

Three parts, each run for the old and the new code in turn (old, new, old, new, ...):

- **alone**: the sandbox in a process of its own (`bench/_sandbox_alone.py`): `--charges`
  charges through `InProcessTransport`, then their webhooks delivered by `deliver_due(http_sink)`
  to a receiver that answers at once (`bench/servers/webhook_receiver.py`, another process):
  CPU per charge and per webhook, and the TCP connections the receiver accepted.
- **http**: the sandbox as a split deployment runs it, `paycore processor serve` on SQLite in a
  process of its own (`bench/_sandbox_http.py`), charged by `--clients` threads of paycore's
  `HttpTransport` for `--seconds`, its webhooks to the same receiver: charges/s and the
  process's CPU per charge from the load's start to its last webhook delivered (/proc), so the
  charge's HTTP answer, its write and its webhook are all in it.
- **serve**: `paycore serve --dev` on SQLite (the sandbox in process, as `payments_bench.py`
  runs it), `--clients` threads posting payments for `--seconds` over keep-alive connections
  (`payments_bench.drive`). Reported: payments/s in the window, and counted to the last webhook
  delivered (the window plus the drain); the webhooks still queued in the sandbox when the load
  stops and the time until every one is delivered; the process's CPU per payment from the
  load's start to that moment (/proc); and the sandbox's Python CPU in it, from py-spy samples
  of the process over the same span (`--gil --nonblocking`: only the thread holding the GIL is
  sampled, so a sample is Python CPU; those whose stack holds a `paycore_sandbox` frame,
  divided by the rate). What runs without the GIL (SQLite's own work, the kernel's) is in the
  process's CPU but not in that part; the `alone` figures have all of the sandbox's CPU.
  Checked after each run: every 201 is a `succeeded` payment, the sandbox holds one charge per
  payment and every webhook delivered, `paycore ledger verify` passes.

py-spy is not a project dependency: `.venv/bin/pip install py-spy` (without it, `--no-spy`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
import _sandbox_http as sandbox_http
import payments_bench as pb

HERE = Path(__file__).resolve().parent
DRAIN_TIMEOUT_S = 180.0


def side_env(src: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def start_receiver() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "servers" / "webhook_receiver.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("PORT "), line
    return process, f"http://127.0.0.1:{int(line.split()[1])}/hook"


def run_alone(src: Path, workdir: Path, charges: int) -> dict[str, Any]:
    receiver, url = start_receiver()
    try:
        done = subprocess.run(
            [sys.executable, str(HERE / "_sandbox_alone.py"), "--workdir", str(workdir), "--charges", str(charges),
             "--receiver", url],
            env=side_env(src), capture_output=True, text=True, check=False, cwd=workdir,
        )  # fmt: skip
    finally:
        receiver.terminate()
        receiver.wait(10)
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not found:
        raise RuntimeError(f"_sandbox_alone.py failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(found[0].removeprefix("RESULT "))
    return result


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pending_webhooks(sandbox_db: Path) -> int:
    with sqlite3.connect(f"file:{sandbox_db}?mode=ro", uri=True, timeout=10) as connection:
        return int(connection.execute("SELECT COUNT(*) FROM sandbox_webhooks WHERE state = 'pending'").fetchone()[0])


def sandbox_counts(sandbox_db: Path) -> tuple[int, dict[str, int]]:
    with sqlite3.connect(f"file:{sandbox_db}?mode=ro", uri=True, timeout=10) as connection:
        charges = int(connection.execute("SELECT COUNT(*) FROM sandbox_charges").fetchone()[0])
        states = dict(connection.execute("SELECT state, COUNT(*) FROM sandbox_webhooks GROUP BY state").fetchall())
    return charges, states


def start_serve(src: Path, workdir: Path, tag: str) -> tuple[subprocess.Popen[bytes], int, Path, Path, Path]:
    paycore_db, sandbox_db = workdir / f"paycore-{tag}.db", workdir / f"sandbox-{tag}.db"
    env = side_env(
        src,
        {
            "PAYCORE_DATABASE_URL": f"sqlite:///{paycore_db}",
            "PAYCORE_SANDBOX_DATABASE_URL": f"sqlite:///{sandbox_db}",
            "PAYCORE_PROCESSOR_TIMEOUT_MS": "2000",
        },
    )
    port = pb.free_port()
    log = workdir / f"serve-{tag}.log"
    with log.open("wb") as sink:
        command = [*pb.paycore_command(), "serve", "--dev", "--port", str(port)]
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    pb.wait_ready(port, process, log)
    return process, port, paycore_db, sandbox_db, log


def wait_drained(sandbox_db: Path) -> float:
    started = time.perf_counter()
    while pending_webhooks(sandbox_db) > 0:
        if time.perf_counter() - started > DRAIN_TIMEOUT_S:
            raise RuntimeError(f"webhooks still queued after {DRAIN_TIMEOUT_S} s")
        time.sleep(0.02)
    return time.perf_counter() - started


def sandbox_samples(raw: Path) -> tuple[int, int]:
    """(samples with a paycore_sandbox frame, all samples)."""
    total = ours = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        if re.search(r"\(paycore_sandbox/", stack):
            ours += int(count)
    return ours, total


def run_serve(src: Path, workdir: Path, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    process, port, paycore_db, sandbox_db, log = start_serve(src, workdir, tag)
    spy: subprocess.Popen[bytes] | None = None
    raw = workdir / f"spy-{tag}.txt"
    try:
        account = pb.merchant_account(port, tag)

        def pay(connection: pb.Client, key: str) -> int:
            body = pb.payment_body(account)
            return connection.call("POST", "/v1/payments", body, {"Idempotency-Key": key})[0]

        pb.drive([port], args.clients, args.warmup_s, pay, f"{tag}-warm")
        wait_drained(sandbox_db)
        before = cpu_s(process.pid)
        if not args.no_spy:
            spy_bin = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            spy = subprocess.Popen(
                [spy_bin, "record", "--gil", "--nonblocking", "-r", str(args.rate), "-f", "raw", "-o", str(raw),
                 "-p", str(process.pid)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(0.5)  # py-spy attaches
        result = pb.drive([port], args.clients, args.seconds, pay, tag)
        queued_at_stop = pending_webhooks(sandbox_db)
        drain_s = wait_drained(sandbox_db)
        spent_s = cpu_s(process.pid) - before
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        ours, samples = sandbox_samples(raw) if spy is not None else (0, 0)
        charges, states = sandbox_counts(sandbox_db)
        verdict = pb.check(pb.Deployment("sqlite", f"sqlite:///{paycore_db}", f"sqlite:///{sandbox_db}", [port],
                                         [process], [log]), result["count_201"])  # fmt: skip
        if set(states) != {"delivered"}:
            verdict = f"{verdict}; webhooks {states}" if verdict != "ok" else f"webhooks {states}"
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
    payments = max(result["count_201"], 1)
    return {
        **result,
        "queued_at_stop": queued_at_stop,
        "drain_s": drain_s,
        "to_last_webhook_per_s": result["count_201"] / (args.seconds + drain_s),
        "cpu_ms_per_payment": 1000 * spent_s / payments,
        "sandbox_python_ms_per_payment": 1000 * ours / args.rate / payments if samples else float("nan"),
        "samples": samples,
        "charges": charges,
        "check": verdict,
    }


MEDIANS = [
    ("alone", "charge_cpu_us", "CPU µs / charge, alone", 0),
    ("alone", "deliver_cpu_us", "CPU µs / webhook, alone", 0),
    ("alone", "connections", "TCP connections opened for the webhooks, alone", 0),
    ("http", "cpu_us_per_charge", "CPU µs / charge and its webhook, processor serve over HTTP", 0),
    ("http", "charges_per_s", "charges/s, processor serve over HTTP", 0),
    ("serve", "payments_per_s", "payments/s, serve --dev", 0),
    ("serve", "to_last_webhook_per_s", "payments/s to the last webhook", 0),
    ("serve", "cpu_ms_per_payment", "process CPU ms / payment", 2),
    ("serve", "sandbox_python_ms_per_payment", "sandbox Python CPU ms / payment", 2),
    ("serve", "queued_at_stop", "webhooks queued at stop", 0),
    ("serve", "count_201", "payments in the window", 0),
    ("serve", "drain_s", "s to deliver them", 2),
]


def medians(raw: dict[tuple[str, str], list[dict[str, Any]]], names: list[str]) -> list[str]:
    """One row per figure: its median over the rounds for each code, and new / old."""
    rows = []
    for part, key, label, digits in MEDIANS:
        values = [common.median([run[key] for run in raw.get((name, part), [])] or [float("nan")]) for name in names]
        ratio = [common.fmt_ratio(common.ratio(values[-1], values[0]))] if len(names) == 2 else []
        if any(value == value for value in values if value is not None):  # some measured (not NaN)
            rows.append([label, *(common.fmt(value, digits) for value in values), *ratio])
    headers = ["median over the rounds", *names, *(["new / old"] if len(names) == 2 else [])]
    return ["### Medians", "", common.markdown_table(headers, rows), ""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-src", type=Path, help="the older commit's src/ (omit: this checkout only)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parts", default="alone,http,serve")
    parser.add_argument("--charges", type=int, default=2000, help="alone: charges per run")
    parser.add_argument("--seconds", type=float, default=10, help="serve: measured seconds of load")
    parser.add_argument("--warmup-s", type=float, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--no-spy", action="store_true")
    args = parser.parse_args()
    sides = [("new", common.REPO / "src")]
    if args.old_src is not None:
        sides.insert(0, ("old", args.old_src.resolve()))
    workdir = Path(tempfile.mkdtemp(prefix="paycore-sandbox-bench-"))
    parts = args.parts.split(",")
    alone_rows: list[list[Any]] = []
    serve_rows: list[list[Any]] = []
    http_rows: list[list[Any]] = []
    raw: dict[tuple[str, str], list[dict[str, Any]]] = {}
    load_before = common.load_average()
    for round_number in range(1, args.rounds + 1):
        for name, src in sides:
            if "alone" in parts:
                alone = run_alone(src, workdir, args.charges)
                raw.setdefault((name, "alone"), []).append(alone)
                alone_rows.append([name, round_number, common.fmt(alone["charge_cpu_us"]),
                                   common.fmt(alone["deliver_cpu_us"]), common.fmt(alone["deliver_wall_us"]),
                                   alone["delivered"], alone["connections"]])  # fmt: skip
                print(alone_rows[-1], file=sys.stderr, flush=True)
            if "http" in parts:
                receiver, url = start_receiver()
                try:
                    served = sandbox_http.run(side_env(src), workdir, f"{name}-r{round_number}", url, args, cpu_s)
                finally:
                    receiver.terminate()
                    receiver.wait(10)
                raw.setdefault((name, "http"), []).append(served)
                http_rows.append([name, round_number, common.fmt(served["charges_per_s"]), served["charges"],
                                  common.fmt(served["cpu_us_per_charge"]), common.fmt(served["drain_s"], 2),
                                  served["check"]])  # fmt: skip
                print(http_rows[-1], file=sys.stderr, flush=True)
            if "serve" in parts:
                found = run_serve(src, workdir, args, f"{name}-r{round_number}")
                raw.setdefault((name, "serve"), []).append(found)
                serve_rows.append([name, round_number, common.fmt(found["payments_per_s"]),
                                   common.fmt(found["to_last_webhook_per_s"]),
                                   common.fmt(found["p99_ms"]), common.fmt(found["cpu_ms_per_payment"], 2),
                                   common.fmt(found["sandbox_python_ms_per_payment"], 2),
                                   f"{found['queued_at_stop']} of {found['count_201']}",
                                   common.fmt(found["drain_s"], 2), found["check"]])  # fmt: skip
                print(serve_rows[-1], file=sys.stderr, flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    facts = common.machine_facts([("load average before", load_before)])
    report = [
        "## The sandbox processor's own cost (bench/sandbox_bench.py)",
        "",
        f"Command: `{common.command_line()}`",
        "",
        common.facts_table(facts),
        "",
    ]
    if alone_rows:
        headers = ["code", "round", "CPU µs / charge", "CPU µs / webhook", "wall µs / webhook", "webhooks",
                   "TCP connections"]  # fmt: skip
        report += ["### Alone", "", common.markdown_table(headers, alone_rows), ""]
    if http_rows:
        headers = ["code", "round", "charges/s", "charges", "CPU µs / charge and its webhook", "s to deliver the rest",
                   "check"]  # fmt: skip
        report += ["### processor serve over HTTP, SQLite", "", common.markdown_table(headers, http_rows), ""]
    if serve_rows:
        headers = ["code", "round", "payments/s", "payments/s to the last webhook", "p99 ms",
                   "process CPU ms / payment", "sandbox Python CPU ms / payment", "webhooks queued at stop",
                   "s to deliver them", "check"]  # fmt: skip
        report += ["### serve --dev, SQLite", "", common.markdown_table(headers, serve_rows), ""]
    report += medians(raw, [name for name, _ in sides])
    print("\n".join(report))
    return 0 if all(row[-1] == "ok" for row in serve_rows + http_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
