#!/usr/bin/env python3
"""One split deployment's round (`_target_payments.split_round`: 1 API process + 1 worker, the
sandbox its own service) for two trees, alternated in one run (old, new, old, new ...), so that
both see the same machine noise: payments/s, the CPU a payment by group of processes (API,
worker, sandbox, PostgreSQL's backends) and their sum, by process accounting.

    .venv/bin/python bench/split_side_by_side.py --old-tree ../main --rounds 4 [--backend postgres]

Each round runs in a subprocess from its own tree (that tree's bench scripts, its `src` first on
PYTHONPATH, so its `paycore` processes run its code) with this checkout's interpreter. Prints a
line a round and the medians, the ratios new/old and the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_ROUND = """
import argparse, json, sys, tempfile
from pathlib import Path
from typing import Any
sys.path.insert(0, "bench")
import _common as common
from _target_payments import split_round
args = argparse.Namespace(postgres_url=common.DEFAULT_POSTGRES_URL, clients={clients})
size = {{"warmup_s": {warmup_s}, "pay_s": {pay_s}}}
with tempfile.TemporaryDirectory() as workdir:
    result = split_round(args, "{backend}", 1, 1, size, Path(workdir), "{tag}")
print(json.dumps({{"per_s": result["found"]["payments_per_s"], "ms": result["per_payment_ms"],
                  "verdict": result["verdict"], "line": result["line"]}}))
"""


def one_round(tree: Path, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    code = _ROUND.format(
        clients=args.clients, warmup_s=args.warmup_s, pay_s=args.seconds, backend=args.backend, tag=tag
    )
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-tree", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    args = parser.parse_args()
    trees = {"old": args.old_tree.resolve(), "new": HERE.parent}
    print(f"load average at start: {os.getloadavg()}", flush=True)
    found: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for round_index in range(1, args.rounds + 1):
        for side, tree in trees.items():
            result = one_round(tree, args, f"{side}{round_index}")
            found[side].append(result)
            print(f"round {round_index} {side}: {result['line']} [{result['verdict']}]", flush=True)
    print(f"load average at end: {os.getloadavg()}")
    for figure in ("api", "postgres", "sandbox", "workers", "sum", "per_s"):
        medians = {
            side: statistics.median(_figure(result, figure) for result in results) for side, results in found.items()
        }
        ratio = medians["new"] / medians["old"] if medians["old"] else float("nan")
        unit = "payments/s" if figure == "per_s" else "ms CPU a payment"
        print(f"{figure}: old {medians['old']:.2f}, new {medians['new']:.2f} {unit} (medians), new/old {ratio:.2f}x")


def _figure(result: dict[str, Any], figure: str) -> float:
    """A round's payments/s, one group's CPU a payment, or their sum (`sum`)."""
    if figure == "per_s":
        return float(result["per_s"])
    if figure == "sum":
        return float(sum(result["ms"].values()))
    return float(result["ms"][figure])


if __name__ == "__main__":
    main()
