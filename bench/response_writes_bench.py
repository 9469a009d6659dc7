#!/usr/bin/env python3
"""What paycore's HTTP server costs a response, two commits side by side (`http/protocol.py`,
`http/cycle.py`; `http/coalesced.py` before paycore had its own protocol).

    .venv/bin/python bench/response_writes_bench.py --before main --after HEAD --rounds 6

Each commit's `src/` is exported (`credits_side_by_side.export`) and serves, through its own
`paycore.http.server.Server` (the protocol `paycore serve` runs), an ASGI app that reads the
body and answers a fixed 201 JSON body of a payment's size: no database, no paycore route, so
the figure is the server's own per-response work (parsing, the cycle, the socket writes). The
rounds alternate before/after (and which goes first). In each, client threads post over
keep-alive `http.client` connections; the server process's CPU (utime + stime, /proc) over the
measured requests. Reported: µs CPU a response and responses/s per round, their medians and the
after/before ratios.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import credits_http_bench
from credits_side_by_side import cpu_s, export

SERVER = """
import sys
from paycore.config import Settings
from paycore.http.server import Server

BODY = b'{"id":"pay_01JABCDEFGHJKMNPQRSTVWXYZ0","status":"succeeded","amount_minor":1999,"currency":"EUR"}'
HEAD = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 201, "headers": HEAD})
    await send({"type": "http.response.body", "body": BODY})


Server(app, "127.0.0.1", int(sys.argv[1]), settings=Settings.from_env()).serve_forever()
"""
REQUEST = b'{"amount_minor":1999}'


def _post(connection: http.client.HTTPConnection) -> None:
    connection.request("POST", "/", REQUEST, {"content-type": "application/json"})
    response = connection.getresponse()
    response.read()
    assert response.status == 201, response.status


def one_round(src: Path, script: Path, args: argparse.Namespace) -> tuple[float, float]:
    port = credits_http_bench.free_port()
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    process = subprocess.Popen([sys.executable, str(script), str(port)], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _post(http.client.HTTPConnection("127.0.0.1", port, timeout=10))
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.1)

        def client(count: int) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            for _ in range(count):
                _post(connection)

        client(200)  # warm-up
        threads = [threading.Thread(target=client, args=(args.requests,)) for _ in range(args.clients)]
        used_s, started_s = cpu_s(process.pid), time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        used_s, elapsed_s = cpu_s(process.pid) - used_s, time.monotonic() - started_s
    finally:
        process.terminate()
        process.wait(10)
    total = args.requests * args.clients
    return used_s * 1e6 / total, total / elapsed_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="main")
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=2500, help="per client thread and round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="response-writes-") as scratch:
        workdir = Path(scratch)
        script = workdir / "server.py"
        script.write_text(SERVER)
        sources = {
            label: export(commit, workdir / f"tree-{label}")
            for label, commit in (("before", args.before), ("after", args.after))
        }
        found: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for number in range(args.rounds):
            order = ("before", "after") if number % 2 == 0 else ("after", "before")
            for label in order:
                cpu_us, rate = one_round(sources[label], script, args)
                found[label].append((cpu_us, rate))
                load = os.getloadavg()[0]
                print(
                    f"round {number} {label}: {cpu_us:.1f} µs CPU a response, {rate:,.0f}/s, load {load:.1f}",
                    flush=True,
                )
    cpu = {label: statistics.median(value for value, _ in rows) for label, rows in found.items()}
    rate = {label: statistics.median(value for _, value in rows) for label, rows in found.items()}
    print(f"\nbefore {args.before}, after {args.after}: {args.rounds} rounds, {args.clients} clients")
    print("| commit | µs CPU a response, server (median) | responses/s (median) |")
    print("|---|---|---|")
    for label in ("before", "after"):
        print(f"| {label} | {cpu[label]:.1f} | {rate[label]:,.0f} |")
    print(f"| after / before | {cpu['after'] / cpu['before']:.2f}x | {rate['after'] / rate['before']:.2f}x |")


if __name__ == "__main__":
    main()
