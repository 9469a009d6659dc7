"""SPEC §4: a no_overdraft account spent concurrently by several OS processes through several
server processes is never overdrawn, and exactly what the 201s say left it.

The spenders (spender.py) are separate OS processes; the servers are separate `paycore serve`
processes on one database. So the only thing that can serialise two transfers spending the
same money is the database: the account's row lock on PostgreSQL, the single writer on SQLite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import (
    StartServers,
    account_balance,
    account_entries,
    assert_ledger_verifies,
    create_account,
    transfer,
)

SPENDER = Path(__file__).with_name("spender.py")
FUNDING_MINOR = 1000
AMOUNT_MAX_MINOR = 20
WORKERS = 4
RUN_TIMEOUT_S = 90


def _watch(ports: list[int], tenant: str, account_id: str, stop: threading.Event, seen: list[dict[str, int]]) -> None:
    """Read the account's balance over and over, through every server, until stopped."""
    index = 0
    while not stop.is_set():
        seen.append(account_balance(ports[index % len(ports)], tenant, account_id))
        index += 1
        stop.wait(0.02)


def spend_concurrently(database_url: str, ports: list[int], tenant: str) -> None:
    port = ports[0]
    funding = create_account(port, tenant, "funding", normal_balance="debit", no_overdraft=False)
    wallet = create_account(port, tenant, "wallet", normal_balance="credit", no_overdraft=True)
    sink = create_account(port, tenant, "sink", normal_balance="credit", no_overdraft=False)
    funded = transfer(port, tenant, "fund-wallet", funding, wallet, FUNDING_MINOR)
    assert funded.status == 201, funded
    assert account_balance(port, tenant, wallet) == {
        "posted_minor": FUNDING_MINOR,
        "pending_minor": 0,
        "available_minor": FUNDING_MINOR,
    }

    start_at_ns = time.time_ns() + 500_000_000  # every spender is up by then; they start together
    spenders = []
    for worker in range(WORKERS):
        config = {
            "ports": ports[worker % len(ports) :] + ports[: worker % len(ports)],
            "tenant": tenant,
            "from": wallet,
            "to": sink,
            "seed": 1000 + worker,
            "amount_max": AMOUNT_MAX_MINOR,
            "budget_minor": FUNDING_MINOR,
            "prefix": f"spend-w{worker}",
            "start_at_ns": start_at_ns,
        }
        spenders.append(
            subprocess.Popen(
                [sys.executable, str(SPENDER), json.dumps(config)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    stop = threading.Event()
    seen: list[dict[str, int]] = []
    watcher = threading.Thread(target=_watch, args=(ports, tenant, wallet, stop, seen), daemon=True)
    watcher.start()
    attempts: list[dict[str, Any]] = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        for spender in spenders:
            out, err = spender.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert spender.returncode == 0, err
            attempts.extend(json.loads(out))
    finally:
        stop.set()
        for spender in spenders:
            if spender.poll() is None:
                spender.kill()
                spender.communicate(timeout=10)
        watcher.join(10)
    assert not watcher.is_alive()

    outcomes = Counter((attempt["status"], attempt["error"]) for attempt in attempts)
    created = [attempt for attempt in attempts if attempt["status"] == 201]
    spent_minor = sum(attempt["amount_minor"] for attempt in created)
    print(f"{len(attempts)} transfers: {dict(outcomes)}; spent {spent_minor}; {len(seen)} balance reads")
    # Every answer is a transfer or a refusal for want of funds: no 409/500/503.
    assert set(outcomes) <= {(201, None), (422, "insufficient_funds")}, outcomes
    # Every spender stopped on a refused 1-unit transfer, so the wallet is exactly empty...
    final = account_balance(port, tenant, wallet)
    assert final == {"posted_minor": 0, "pending_minor": 0, "available_minor": 0}, final
    # ...and the 201s' amounts add up to exactly what left it: all of it, not a unit more.
    assert spent_minor == FUNDING_MINOR - final["posted_minor"] == FUNDING_MINOR
    assert account_balance(port, tenant, sink)["posted_minor"] == spent_minor
    # Never below zero while it ran, and only ever going down (reads see commits in order).
    assert seen, "the watcher read no balance"
    assert all(balance["available_minor"] >= 0 and balance["posted_minor"] >= 0 for balance in seen)
    posted = [balance["posted_minor"] for balance in seen]
    assert posted == sorted(posted, reverse=True), "the wallet's balance went up while only spending happened"
    # The wallet's debits are exactly the 201 transfers, each once, for its amount; a refused
    # transfer wrote nothing.
    debits = {
        entry["transfer_id"]: entry["amount_minor"]
        for entry in account_entries(port, tenant, wallet)
        if entry["direction"] == "debit"
    }
    assert debits == {attempt["transfer_id"]: attempt["amount_minor"] for attempt in created}

    # A retry of every request, through another server, replays its first answer and moves nothing.
    def retry(attempt: dict[str, Any]) -> None:
        other = ports[(ports.index(attempt["port"]) + 1) % len(ports)]
        reply = transfer(other, tenant, attempt["key"], wallet, sink, attempt["amount_minor"])
        assert reply.status == attempt["status"], (attempt, reply)
        assert reply.headers.get("idempotent-replayed") == "true", reply
        assert reply.error == attempt["error"], reply
        if reply.status == 201:
            assert reply.body["id"] == attempt["transfer_id"], reply

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(retry, attempts, timeout=RUN_TIMEOUT_S))
    assert account_balance(port, tenant, wallet)["posted_minor"] == 0
    assert account_balance(port, tenant, sink)["posted_minor"] == spent_minor
    assert_ledger_verifies(database_url)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_4_processes_spending_one_no_overdraft_account_through_4_servers_never_overdraw(
    database_url: str, serve_processes: StartServers
) -> None:
    servers = serve_processes(4, database_url)
    spend_concurrently(database_url, [server.port for server in servers], "spend-pg")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_4_processes_spending_one_no_overdraft_account_through_2_servers_on_one_sqlite_file_never_overdraw(
    database_url: str, serve_processes: StartServers
) -> None:
    servers = serve_processes(2, database_url)
    spend_concurrently(database_url, [server.port for server in servers], "spend-sqlite")
