"""For bench/sandbox_bench.py: the sandbox processor alone, in this process, with whatever
`paycore_sandbox` is first on PYTHONPATH (so the same script measures an older commit).

    python bench/_sandbox_alone.py --workdir DIR --charges 2000 --receiver http://127.0.0.1:PORT/hook

Takes `--charges` charges through `InProcessTransport` (as `serve --dev` does) on a fresh
SQLite file, then delivers their webhooks with `deliver_due(http_sink(receiver))` until none is
due, and prints one JSON line: CPU and wall time per charge and per webhook (the CPU of the whole
process, every thread of it), and what the receiver counted. Uses only the sandbox's public API,
which the older commits have too.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path
from typing import Any


def receiver_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url.rsplit("/", 1)[0] + "/stats", timeout=10) as answer:
        stats: dict[str, int] = json.loads(answer.read())
        return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--charges", type=int, default=2000)
    parser.add_argument("--receiver", required=True)
    args = parser.parse_args()

    from paycore.processor.port import ChargeRequest
    from paycore_sandbox import Sandbox, http_sink
    from paycore_sandbox.inprocess import InProcessTransport

    path = Path(args.workdir) / f"sandbox-alone-{time.time_ns()}.db"
    sandbox = Sandbox.open(f"sqlite:///{path}")
    transport = InProcessTransport(sandbox)
    for index in range(50):  # warm-up: imports, statement caches, the pool
        transport.charge(ChargeRequest(f"warm-{index}", "m", 1000, "USD", "tok_ok"))
    sink = http_sink(args.receiver)
    while sandbox.deliver_due(sink):
        pass
    before = receiver_stats(args.receiver)

    cpu, wall = time.process_time(), time.perf_counter()
    for index in range(args.charges):
        transport.charge(ChargeRequest(f"c-{index}", "m", 1000, "USD", "tok_ok"))
    charge_cpu, charge_wall = time.process_time() - cpu, time.perf_counter() - wall

    cpu, wall = time.process_time(), time.perf_counter()
    delivered = 0
    while True:
        sent = sandbox.deliver_due(sink)
        if sent == 0:
            break
        delivered += sent
    deliver_cpu, deliver_wall = time.process_time() - cpu, time.perf_counter() - wall
    after = receiver_stats(args.receiver)
    sandbox.close()
    result: dict[str, Any] = {
        "charges": args.charges,
        "charge_cpu_us": 1e6 * charge_cpu / args.charges,
        "charge_wall_us": 1e6 * charge_wall / args.charges,
        "delivered": delivered,
        "deliver_cpu_us": 1e6 * deliver_cpu / max(delivered, 1),
        "deliver_wall_us": 1e6 * deliver_wall / max(delivered, 1),
        "received": after["requests"] - before["requests"],
        "connections": after["connections"] - before["connections"] - 1,  # not the `after` GET's own
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
