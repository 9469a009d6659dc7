#!/usr/bin/env python3
"""Would one server call per transfer lift PostgreSQL's hot account to 1,000 transfers/s?
(issue 2, "what would lift it"; an experiment on paycore's schema, not paycore's code path.)

Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/pg_one_call.py --clients 1,4 --duration-s 5 --repeats 3

A fresh database `bench_onecall_*` is migrated with `paycore db upgrade` (the whole schema at
head: every key, index, foreign key and the deferred balance trigger). A PL/pgSQL function
writes one transfer's rows (key claim, transfer, the destination's balance UPDATE, the
source's balance UPDATE with its no-overdraft check, two entries, the recorded response) in
ONE call, in autocommit: one round trip and one commit per transfer. Clients are OS processes
with one connection each. Scenarios, interleaved in every repeat:

- `limit`: a bare INSERT in autocommit (one round trip and one commit, like the function).
- `spread`: each client moves money from its own funded `no_overdraft` account.
- `hot`: every client moves money from ONE funded `no_overdraft` account, whose row lock is
  then held only inside the server, from its UPDATE to the end of the commit's flush.

The function takes the source's row lock last, as paycore's code would have to if it were
written this way. The rules it applies are a subset of paycore's (one currency, 2 entries, no
fingerprint, no rendering of the response): an upper bound for the design, measured to decide
whether it deserves an ADR. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as common

SCENARIOS = ("limit", "spread", "hot")
FUNDING_MINOR = 10**15
_FUNCTION = """
CREATE FUNCTION bench_transfer(p_key text, p_id text, p_now bigint, p_src text, p_dst text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE s bigint; d bigint;
BEGIN
    INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,
        expires_at_us) VALUES ('t', p_key, 'fp', NULL, NULL, p_now, NULL) ON CONFLICT DO NOTHING;
    INSERT INTO ledger_transfers (tenant_id, id, kind, idempotency_key, reference_type, metadata, created_at_us)
        VALUES ('t', p_id, 'transfer', p_key, 'adjustment', '{}', p_now);
    UPDATE ledger_accounts SET credits_posted_minor = credits_posted_minor + 1, entries_count = entries_count + 1
        WHERE tenant_id = 't' AND id = p_dst RETURNING entries_count INTO d;
    UPDATE ledger_accounts SET debits_posted_minor = debits_posted_minor + 1, entries_count = entries_count + 1
        WHERE tenant_id = 't' AND id = p_src AND credits_posted_minor - debits_posted_minor >= 1
        RETURNING entries_count INTO s;
    IF s IS NULL THEN RAISE EXCEPTION 'insufficient funds'; END IF;
    INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
        account_sequence, created_at_us)
        VALUES ('t', p_id || 'd', p_id, p_src, 'debit', 1, 'USD', s, p_now),
               ('t', p_id || 'c', p_id, p_dst, 'credit', 1, 'USD', d, p_now);
    UPDATE idempotency_keys SET response_status = 201, response_body = '{}' WHERE tenant_id = 't' AND key = p_key;
    RETURN s;
END $$"""


_ACCOUNT = (
    "INSERT INTO ledger_accounts (tenant_id, id, code, currency, normal_balance, no_overdraft, metadata,"
    " debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count,"
    " created_at_us) VALUES ('t', %s, %s, 'USD', 'credit', %s, '{}', 0, %s, 0, 0, 0, 0)"
)


def _account(account_id: str, no_overdraft: bool, funded: bool) -> tuple[str, tuple[Any, ...]]:
    return _ACCOUNT, (account_id, account_id, no_overdraft, FUNDING_MINOR if funded else 0)


def _prepare(admin_url: str, clients_max: int) -> str:
    import psycopg

    name = common.new_postgres_database(admin_url, "onecall")
    env = dict(os.environ, PAYCORE_DATABASE_URL=common.postgres_database_url(admin_url, name))
    paycore = str(Path(sys.executable).parent / "paycore")  # the virtualenv's console script
    subprocess.run([paycore, "db", "upgrade"], env=env, check=True, capture_output=True)
    with psycopg.connect(common.postgres_libpq_url(admin_url, name), autocommit=True) as connection:
        connection.execute("CREATE TABLE bench_commit_probe (id bigserial PRIMARY KEY, note text NOT NULL)")
        connection.execute(*_account("hot", no_overdraft=True, funded=True))
        for index in range(clients_max):
            connection.execute(*_account(f"src{index}", no_overdraft=True, funded=True))
            connection.execute(*_account(f"dst{index}", no_overdraft=False, funded=False))
        connection.execute(_FUNCTION)
    return name


def _client(url: str, scenario: str, index: int, duration_s: float, start_at: float, results: Any) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        tag = secrets.token_hex(4)
        source = "hot" if scenario == "hot" else f"src{index}"
        count = 0
        while time.time() < start_at:
            time.sleep(0.001)
        deadline = time.perf_counter() + duration_s
        while time.perf_counter() < deadline:
            if scenario == "limit":
                connection.execute("INSERT INTO bench_commit_probe (note) VALUES ('x')")
            else:
                key = f"{tag}-{count}"
                connection.execute(
                    "SELECT bench_transfer(%s, %s, %s, %s, %s)",
                    (key, f"txn_{tag}_{count}", count, source, f"dst{index}"),
                )
            count += 1
        results.put(count)


def _run(url: str, scenario: str, clients: int, duration_s: float) -> float:
    context = mp.get_context("spawn")
    results = context.Queue()
    start_at = time.time() + 1.5  # every client connected before the clock starts
    processes = [
        context.Process(target=_client, args=(url, scenario, index, duration_s, start_at, results))
        for index in range(clients)
    ]
    for process in processes:
        process.start()
    total = sum(results.get(timeout=duration_s + 60) for _ in processes)
    for process in processes:
        process.join(timeout=30)
        if process.exitcode != 0:
            raise RuntimeError(f"a {scenario} client exited with {process.exitcode}")
    return total / duration_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--clients", default="1,4", help="comma-separated client counts, each 1..16")
    parser.add_argument("--duration-s", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    client_counts = [int(part) for part in args.clients.split(",")]
    if args.duration_s <= 0 or not 1 <= args.repeats <= 20 or not all(1 <= n <= 16 for n in client_counts):
        parser.error("--duration-s must be > 0, --repeats 1..20 and every client count 1..16")

    print(common.facts_table(common.machine_facts(common.postgres_facts(args.postgres_url))), flush=True)
    name = _prepare(args.postgres_url, max(client_counts))
    url = common.postgres_libpq_url(args.postgres_url, name)
    rates: dict[tuple[str, int], list[float]] = {}
    try:
        for repeat in range(1, args.repeats + 1):
            for clients in client_counts:
                for scenario in SCENARIOS:
                    rate = _run(url, scenario, clients, args.duration_s)
                    rates.setdefault((scenario, clients), []).append(rate)
                    print(f"[{repeat}/{args.repeats}] {scenario:6} clients={clients}: {rate:,.1f}/s", file=sys.stderr)
    finally:
        common.drop_postgres_database(args.postgres_url, name)
    rows = []
    for (scenario, clients), values in rates.items():
        limit = common.median(rates[("limit", clients)])
        rows.append(
            (scenario, clients, common.fmt(common.median(values)), ", ".join(common.fmt(v) for v in values),
             common.fmt_ratio(common.ratio(common.median(values), limit)))
        )  # fmt: skip
    print("\nOne call + commit per transfer, on paycore's whole schema at head:\n")
    print(common.markdown_table(("scenario", "clients", "median/s", "each repeat", "vs limit"), rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
