"""SPEC §3.1 and §4 end to end: `POST /v1/transfers` sent many times with each key, at once,
across 4 `paycore serve` OS processes on one PostgreSQL database. Each transfer happens once,
every copy gets the first answer, and a refusal is recorded once and replayed to every copy.

On PostgreSQL a transfer that succeeds is written by one server call (ADR 0011); the copies
that lose the race on the key, and every refusal, are answered by the reference path. No
in-process lock can be what keeps this right: the copies of one key go to all 4 processes.
"""

from __future__ import annotations

from collections import Counter

import pytest

from paycore.db.engine import Database
from tests.e2e.support import (
    Reply,
    StartServers,
    account_balance,
    assert_ledger_verifies_in_process,
    create_account,
    run_together,
    transfer,
)

TENANT = "xfer8"
FUNDING_MINOR = 10_000
KEYS = 8
COPIES = 10
AMOUNTS = [1000 + 7 * key for key in range(KEYS - 1)] + [FUNDING_MINOR + 1]  # the last is refused


def _one_answer(replies: list[object], status: int) -> Reply:
    """Every copy answered `status` with the same body; exactly one was not a replay."""
    failures = [reply for reply in replies if not isinstance(reply, Reply)]
    assert not failures, failures[:3]
    answers = [reply for reply in replies if isinstance(reply, Reply)]
    assert Counter(reply.status for reply in answers) == {status: COPIES}, answers[:3]
    assert all(reply.body == answers[0].body for reply in answers), answers
    fresh = [reply for reply in answers if reply.headers.get("idempotent-replayed") != "true"]
    assert len(fresh) == 1, fresh
    return answers[0]


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_8_transfer_keys_sent_10_times_each_across_4_server_processes_move_money_once(
    database_url: str, database: Database, serve_processes: StartServers
) -> None:
    ports = [server.port for server in serve_processes(4, database_url)]
    cash = create_account(ports[0], TENANT, "cash", normal_balance="debit", no_overdraft=False)
    wallet = create_account(ports[0], TENANT, "wallet", normal_balance="credit", no_overdraft=True)
    sink = create_account(ports[0], TENANT, "sink", normal_balance="credit", no_overdraft=False)
    assert transfer(ports[1], TENANT, "fund", cash, wallet, FUNDING_MINOR).status == 201

    def send(index: int) -> Reply:
        key = index % KEYS
        port = ports[(index // KEYS) % len(ports)]  # each key's copies are spread over all 4 processes
        return transfer(port, TENANT, f"key-{key}", wallet, sink, AMOUNTS[key])

    replies = run_together(KEYS * COPIES, send)
    for key in range(KEYS - 1):
        created = _one_answer(replies[key::KEYS], 201)
        assert created.body["amount_minor"] == AMOUNTS[key]
    refused = _one_answer(replies[KEYS - 1 :: KEYS], 422)
    assert refused.error == "insufficient_funds"

    spent_minor = sum(AMOUNTS[: KEYS - 1])
    for port in ports:  # every process reads the same committed balances
        assert account_balance(port, TENANT, wallet)["posted_minor"] == FUNDING_MINOR - spent_minor
        assert account_balance(port, TENANT, sink)["posted_minor"] == spent_minor
    assert_ledger_verifies_in_process(database)
