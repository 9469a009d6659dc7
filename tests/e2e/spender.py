"""A spending worker, run as its own OS process by test_no_overdraft_concurrency.py.

    python spender.py '{"ports": [...], "tenant": ..., "from": acct, "to": acct,
                        "seed": int, "amount_max": int, "budget_minor": int, "prefix": str,
                        "start_at_ns": int}'

Waits until `start_at_ns` (so all workers start together), then posts transfers of random
integer amounts (1..amount_max) from `from` to `to`, round-robin over the servers, each with
its own Idempotency-Key. On the first 422 insufficient_funds it switches to 1-unit transfers,
and stops when a 1-unit transfer is refused: the account was empty at that moment, and since
nothing funds it any more, it stays empty. Any other answer stops it too (the test fails on
it), and so does having spent more than `budget_minor`, the whole funding (an overdraft the
test reports, instead of spending on for ATTEMPTS_MAX requests). Prints one JSON line: the
list of attempts. Standard library only, so it starts fast.
"""

from __future__ import annotations

import json
import random
import sys
import time
from http.client import HTTPConnection
from typing import Any

ATTEMPTS_MAX = 2000  # a bound, far above what the funding allows
TIMEOUT_S = 30


def post(port: int, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    connection = HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        connection.request("POST", path, body=json.dumps(body), headers={**headers, "Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def main(config: dict[str, Any]) -> list[dict[str, Any]]:
    rng = random.Random(config["seed"])
    ports: list[int] = config["ports"]
    attempts: list[dict[str, Any]] = []
    draining = False
    spent_minor = 0
    pause_ns = config["start_at_ns"] - time.time_ns()
    if pause_ns > 0:
        time.sleep(pause_ns / 1e9)
    for index in range(ATTEMPTS_MAX):
        amount_minor = 1 if draining else rng.randint(1, config["amount_max"])
        key = f"{config['prefix']}-{index}"
        port = ports[index % len(ports)]
        body = {
            "debit_account_id": config["from"],
            "credit_account_id": config["to"],
            "amount_minor": amount_minor,
            "currency": "USD",
        }
        headers = {"Paycore-Tenant": config["tenant"], "Idempotency-Key": key}
        attempt: dict[str, Any] = {"key": key, "port": port, "amount_minor": amount_minor, "transfer_id": None}
        attempts.append(attempt)
        try:
            status, reply = post(port, "/v1/transfers", body, headers)
        except OSError as error:
            attempt.update(status=None, error=repr(error))
            break
        error_code = reply.get("error") if isinstance(reply, dict) else None
        attempt.update(status=status, error=error_code)
        if status == 201:
            attempt["transfer_id"] = reply["id"]
            spent_minor += amount_minor
            if spent_minor > config["budget_minor"]:
                break  # this worker alone spent more than was ever there
            continue
        if status == 422 and error_code == "insufficient_funds" and not draining:
            draining = True
            continue
        break  # a refused 1-unit transfer (done), or an unexpected answer (the test reports it)
    return attempts


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
