"""A fault run with a hostile tenant (docs/ledger.md, "Who may move a transfer").

Real processes: the sandbox processor and bank (with a seeded fault plan: lost answers, 500s,
delays, duplicated webhooks), two `paycore serve` processes and a `paycore worker` on the test's
database. The tenant's honest side takes payments, refunds them in part and pays out; at the same
time its hostile side, with nothing but the same access, reads its statements and hammers every
transfer the flows own with post, void and reverse, and tries to take money out of paycore's
own accounts. The worker is killed with SIGKILL half-way and started again.

At the end: every attack was refused (409 `managed_transfer` or 403 `system_account`), nothing
is left in doubt, the processor charged only the payments and the bank paid out only the
payouts, never more than their source held, `paycore ledger verify` passes (the books, and the
books against every flow's state), and the running invariant checks found nothing: no money
moved twice.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import threading
import time
from collections import Counter
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.payments_support import POLL_S, CliProcess, SandboxProcess, clean_env
from tests.e2e.support import SERVER_POOL_SIZE, Reply, assert_ledger_verifies, call
from tests.e2e.test_payments_multiprocess import Stoppable, start_sandbox_and_two_apis, started

TENANT = "hostile"
PAYMENTS = 24
ATTACK_S = 12.0  # the attacker hammers while the honest traffic runs, at least this long
SETTLE_S = 60  # every payment, refund and payout out of doubt within this, once faults stop
SEED = 38
FUNDED_MINOR = 100_000  # the payouts' source account holds this much
FAULTS = [
    {"fault": "drop_response", "percent": 20, "ops": ["charge", "refund", "payout"]},
    {"fault": "error_500", "percent": 10, "ops": ["charge", "refund", "payout", "get_charge"]},
    {"fault": "duplicate_webhook", "percent": 30},
    {"fault": "delay_ms", "delay_ms": 150, "percent": 20},
]
_keys = itertools.count(1)
__all__ = ["started"]  # the fixture: every process the test starts, stopped at teardown


def tenant(port: int, method: str, path: str, body: Any = None, *, key: bool = False) -> Reply:
    headers = {"Paycore-Tenant": TENANT}
    if key:
        headers["Idempotency-Key"] = f"k-{next(_keys)}"
    return call(port, method, path, body, headers=headers, timeout_s=30)


def account(port: int, code: str, normal_balance: str) -> str:
    reply = tenant(port, "POST", "/v1/accounts", {"code": code, "currency": "USD", "normal_balance": normal_balance})
    assert reply.status == 201, reply
    return str(reply.body["id"])


class Attacker:
    """Reads the tenant's statements and tries every flow-owned transfer it finds, again and
    again, until stopped. Counts each answer by (action, status, error)."""

    def __init__(self, ports: list[int], accounts: list[str]) -> None:
        self.ports, self.accounts = ports, accounts
        self.answers: Counter[tuple[str, int, str | None]] = Counter()
        self.moved: list[Reply] = []  # a 2xx on a flow's transfer: must stay empty
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rounds = itertools.count()
        while not self.stop.is_set():
            port = self.ports[next(rounds) % 2]
            for transfer in self._owned(port):
                for action in ("void", "post", "reverse"):
                    reply = tenant(port, "POST", f"/v1/transfers/{transfer['id']}/{action}", key=True)
                    self.answers[(action, reply.status, reply.error)] += 1
                    if reply.status < 300:
                        self.moved.append(reply)
                self._take_from_paycore(port, transfer)

    def _owned(self, port: int) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for account_id in self.accounts:
            reply = tenant(port, "GET", f"/v1/accounts/{account_id}/entries?limit=100")
            for entry in reply.body["data"]:
                if entry["transfer_id"] not in seen:
                    found = tenant(port, "GET", f"/v1/transfers/{entry['transfer_id']}")
                    seen[entry["transfer_id"]] = found.body
        return [transfer for transfer in seen.values() if transfer["owner_id"] is not None]

    def _take_from_paycore(self, port: int, transfer: dict[str, Any]) -> None:
        mine = self.accounts[0]
        for entry in transfer["entries"]:
            if entry["account_id"] in self.accounts:
                continue
            body = {"debit_account_id": entry["account_id"], "credit_account_id": mine, "amount_minor": 50_000}
            reply = tenant(port, "POST", "/v1/transfers", {**body, "currency": "USD"}, key=True)
            self.answers[("take", reply.status, reply.error)] += 1
            if reply.status < 300:
                self.moved.append(reply)


def honest_traffic(ports: list[int], merchant: str, source: str) -> dict[str, list[str]]:
    made: dict[str, list[str]] = {"payments": [], "refunds": [], "payouts": []}
    randomness = random.Random(SEED)
    for number in range(PAYMENTS):
        port = ports[number % 2]
        token = "tok_declined" if number % 6 == 5 else "tok_ok"
        body = {
            "amount_minor": 1_000 + number,
            "currency": "USD",
            "source": {"type": "card", "token": token},
            "destination_account": merchant,
        }
        reply = tenant(port, "POST", "/v1/payments", body, key=True)
        if reply.status in (201, 202, 402):
            made["payments"].append(reply.body["id"])
        if reply.status == 201 and randomness.random() < 0.5:
            refund = tenant(port, "POST", f"/v1/payments/{reply.body['id']}/refunds", {"amount_minor": 300}, key=True)
            if refund.status == 201:
                made["refunds"].append(refund.body["id"])
        if number % 4 == 0:
            payout = {
                "amount_minor": 700,
                "currency": "USD",
                "source_account": source,
                "rail": "ach",
                "beneficiary": {"name": "Ada", "routing_number": "110000000", "account_number": "000123456789"},
            }
            reply = tenant(port, "POST", "/v1/payouts", payout, key=True)
            if reply.status == 201:
                made["payouts"].append(reply.body["id"])
    return made


def ever_in_doubt(port: int, made: dict[str, list[str]]) -> int:
    """How many of the objects went through `in_doubt` (the faults did their part)."""
    return sum(
        any(step["to"] == "in_doubt" for step in tenant(port, "GET", f"/v1/{kind}/{object_id}").body["history"])
        for kind, object_ids in made.items()
        for object_id in object_ids
    )


def settled(port: int, made: dict[str, list[str]]) -> list[str]:
    """The objects still in doubt or processing."""
    waiting = []
    for kind, object_ids in made.items():
        for object_id in object_ids:
            status = tenant(port, "GET", f"/v1/{kind}/{object_id}").body["status"]
            if status in ("processing", "in_doubt"):
                waiting.append(f"{object_id} {status}")
    return waiting


@pytest.mark.slow
def test_a_hostile_tenant_moves_no_money_through_a_fault_run(
    tmp_path: Path, database_url: str, started: list[tuple[str, Stoppable]]
) -> None:
    sandbox, ports = start_sandbox_and_two_apis(tmp_path, database_url, started, webhooks_to_api=True)
    worker_env = clean_env(
        PAYCORE_DATABASE_URL=database_url,
        PAYCORE_DB_POOL_SIZE=str(SERVER_POOL_SIZE),
        PAYCORE_PROCESSOR_URL=sandbox.url,
        PAYCORE_PROCESSOR_TIMEOUT_MS="2000",
        PAYCORE_WORKER_INTERVAL_MS="100",
        PAYCORE_RESOLVER_BACKOFF_MS="100",
        PAYCORE_RESOLVER_BACKOFF_MAX_MS="500",
        PAYCORE_CLAIM_LEASE_MS="3000",
        PAYCORE_PROCESSING_STALE_MS="3000",
        PAYCORE_INVARIANTS_INTERVAL_MS="500",
    )
    worker = CliProcess(["worker"], worker_env, tmp_path / "worker.log")
    started.append(("worker", worker))
    worker.launch()

    merchant = account(ports[0], "merchant.main", "credit")
    source = account(ports[0], "seller.main", "credit")
    funding = account(ports[0], "funding", "debit")
    funded = tenant(
        ports[0],
        "POST",
        "/v1/transfers",
        {"debit_account_id": funding, "credit_account_id": source, "amount_minor": FUNDED_MINOR, "currency": "USD"},
        key=True,
    )
    assert funded.status == 201, funded
    sandbox.set_faults({"seed": SEED, "hold_ms": 2500, "rules": FAULTS})

    attacker = Attacker(ports, [merchant, source])
    attacker.thread.start()
    started_s = time.monotonic()
    made = honest_traffic(ports, merchant, source)
    worker.kill9()
    worker.launch()
    time.sleep(max(0.0, ATTACK_S - (time.monotonic() - started_s)))
    attacker.stop.set()
    attacker.thread.join(60)
    assert not attacker.thread.is_alive()

    sandbox.clear_faults()
    deadline = time.monotonic() + SETTLE_S
    while (waiting := settled(ports[1], made)) and time.monotonic() < deadline:
        time.sleep(POLL_S * 10)
    assert waiting == [], waiting

    doubted = ever_in_doubt(ports[0], made)
    print(f"attacks: {dict(attacker.answers)}; made: { {k: len(v) for k, v in made.items()} }; in doubt: {doubted}")
    assert doubted > 0  # the faults reached the flows
    assert attacker.moved == [], attacker.moved
    refused = {(status, error) for (_, status, error) in attacker.answers}
    assert refused <= {(409, "managed_transfer"), (403, "system_account")}, attacker.answers
    assert sum(attacker.answers.values()) > 100, attacker.answers  # it really hammered
    assert len(made["payments"]) == PAYMENTS and made["refunds"] and made["payouts"], made
    charged = {row["request_id"]: row["amount_minor"] for row in sandbox.charge_rows()}
    assert set(charged) <= set(made["payments"]), charged  # no charge but the payments'
    paid_out = sandbox_rows(sandbox, "sandbox_bank_payouts")
    assert {row["request_id"] for row in paid_out} <= set(made["payouts"]), paid_out
    assert sum(row["amount_minor"] for row in paid_out) <= FUNDED_MINOR  # never more than the source had

    time.sleep(1.5)  # the worker's invariant checks run every 0.5 s
    assert_no_findings(metrics_text(ports[0]))
    assert_ledger_verifies(database_url)


def sandbox_rows(sandbox: SandboxProcess, table: str) -> list[dict[str, Any]]:
    """The sandbox's own rows of `table`, read from its SQLite file (read-only)."""
    connection = sqlite3.connect(f"file:{sandbox.database_path}?mode=ro", uri=True, timeout=10)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in connection.execute(f"SELECT * FROM {table}")]
    finally:
        connection.close()


def metrics_text(port: int) -> str:
    connection = HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        return connection.getresponse().read().decode()
    finally:
        connection.close()


def assert_no_findings(metrics: str) -> None:
    """Every invariant check on /metrics, books against states included, found nothing."""
    lines = [line for line in metrics.splitlines() if line.startswith("paycore_invariant_violations_total{")]
    assert len(lines) >= 16, lines
    assert all(line.endswith(" 0.0") for line in lines), lines
    assert "paycore_duplicate_money_movements_total 0.0" in metrics
