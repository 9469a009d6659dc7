#!/usr/bin/env python3
"""What a worker round's claim costs on PostgreSQL (ADR 0033): on a
fresh migrated database, payments left `in_doubt` and due, spread over tenants in several shapes
(one tenant; many tenants; one tenant's backlog older than a few other tenants' items), then
`lifecycle.store.claim_due` of one batch, timed in-process, in a transaction rolled back after
each round (every round sees the same queue): its wall time, its statements and how many
tenants it served, and the CPU a claim cost (its PostgreSQL backend's, and this process's:
SQLAlchemy and the driver), averaged over the rounds: on a busy machine the wall time measures
the wait for a core as much as the claim. Money amounts of the rows are integers; nothing is
sent anywhere.

    .venv/bin/python bench/worker_claims_bench.py --repeats 200
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import _common as common
import credits_http_bench
from serve_workers_bench import cpu_s

# (name, tenants, due items per tenant, a first tenant's backlog older than the rest)
CLAIM_SHAPES = (
    ("one tenant, 1,000 due", 1, 1000, 0),
    ("10 tenants, 100 due each", 10, 100, 0),
    ("100 tenants, 10 due each", 100, 10, 0),
    ("a backlog of 5,000 ahead of 9 tenants' 1 each", 9, 1, 5000),
)
CLAIM_BATCH = 50  # PAYCORE_RESOLVER_BATCH_MAX's default


def claims_main(args: argparse.Namespace) -> int:
    """The claim of one batch of due payments, timed (see the module's docstring)."""
    from paycore.config import Settings
    from paycore.db import observers
    from paycore.db.engine import Database
    from paycore.kit.clock import now_us
    from paycore.lifecycle import store
    from paycore.payments import states
    from paycore.payments.models import payments

    name = common.new_postgres_database(args.postgres_url, "claims")
    url = common.postgres_database_url(args.postgres_url, name)
    credits_http_bench._migrate(url)
    database = Database(Settings(database_url=url, db_pool_size=1))
    statements: list[str] = []
    rows = []
    try:
        with observers.observing(database.engine, lambda sql, *_: statements.append(sql)):
            for shape, tenants, per_tenant, backlog in CLAIM_SHAPES:
                _fill_due(database, payments, tenants, per_tenant, backlog)
                times_us, counts, served = [], [], []
                with database.engine.connect() as connection:  # the pool's one connection: every round's
                    backend = int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
                backend_before, client_before = cpu_s([backend]).get(backend, 0.0), time.process_time()
                for _ in range(args.repeats):
                    with database.engine.connect() as connection:
                        statements.clear()
                        started = time.perf_counter_ns()
                        claimed = store.claim_due(
                            connection,
                            payments,
                            statuses=states.UNRESOLVED,
                            now_us=now_us(),
                            worker_id="bench",
                            lease_until_us=now_us() + 60_000_000,
                            limit=CLAIM_BATCH,
                        )
                        times_us.append((time.perf_counter_ns() - started) / 1000)
                        counts.append(len(statements))
                        served.append(len({row["tenant_id"] for row in claimed}))
                        connection.rollback()
                backend_ms = (cpu_s([backend]).get(backend, 0.0) - backend_before) * 1000 / args.repeats
                client_ms = (time.process_time() - client_before) * 1000 / args.repeats
                assert claimed, "the shape's items are due"
                times_us.sort()
                rows.append(
                    [
                        shape,
                        common.fmt(common.median(times_us)),
                        common.fmt(common.percentile(times_us, 0.99)),
                        common.fmt(backend_ms, 2),
                        common.fmt(client_ms, 2),
                        common.fmt(common.median(counts)),
                        str(len(claimed)),
                        f"{common.fmt(common.median(served))} of {tenants + (1 if backlog else 0)}",
                    ]
                )
                print(f"{shape}: {rows[-1][1]} us median", file=sys.stderr, flush=True)
    finally:
        database.dispose()
        if not args.keep:
            common.drop_postgres_database(args.postgres_url, name)
    headers = [
        "due work",
        "claim us (median)",
        "p99",
        "PostgreSQL CPU ms",
        "bench CPU ms",
        "statements",
        "claimed",
        "tenants served",
    ]
    facts = common.machine_facts([("rounds per shape", str(args.repeats)), *common.postgres_facts(args.postgres_url)])
    text = "\n\n".join(
        [
            f"## A worker round's claim of {CLAIM_BATCH} due payments",
            common.facts_table(facts),
            common.markdown_table(headers, rows),
        ]
    )
    print(text)
    return 0


def _fill_due(database: Any, table: Any, tenants: int, per_tenant: int, backlog: int) -> None:
    """Empty the table, then `per_tenant` in-doubt payments due for each of `tenants` tenants,
    and `backlog` older ones of one more tenant (`backlog`), oldest first."""
    from sqlalchemy import delete, insert

    from paycore.kit.clock import now_us

    now = now_us()
    values = []
    owners = [("backlog", backlog, now - 10_000_000)] if backlog else []
    owners += [(f"tenant-{index:03}", per_tenant, now - 1_000_000) for index in range(tenants)]
    for tenant, count, due_from in owners:
        for number in range(count):
            ident = f"pay_{tenant}_{number:06}"
            values.append(
                {
                    "tenant_id": tenant,
                    "id": ident,
                    "idempotency_key": ident,
                    "amount_minor": 1000,
                    "currency": "USD",
                    "source_type": "card",
                    "source_token": "tok_visa",
                    "destination_account_id": "acc_bench",
                    "metadata": "{}",
                    "status": "in_doubt",
                    "processor_request_id": ident,
                    "transfer_id": f"tr_{ident}",
                    "refunded_minor": 0,
                    "attempts": 1,
                    "next_attempt_at_us": due_from + number,
                    "created_at_us": due_from,
                    "updated_at_us": due_from,
                }
            )

    def work(connection: Any) -> None:
        connection.execute(delete(table))
        connection.execute(insert(table), values)
        connection.exec_driver_sql("ANALYZE payments")

    database.transaction(work)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200, help="claims timed per shape")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL, help="admin URL (libpq form)")
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats >= 1")
    return claims_main(args)


if __name__ == "__main__":
    sys.exit(main())
