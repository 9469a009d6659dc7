"""Refunds/s (issue 4): many agents refunding ONE payment (the hot case, where naive locking
collapses) against the same agents refunding MANY payments, on SQLite and PostgreSQL.

    .venv/bin/python bench/refunds_hot_payment_bench.py [--seconds 8] [--clients 1,4] [--repeat 3]

Each client is a thread with its own connection calling `paycore.refunds.service.create_refund`
in its own transaction (the same code as `POST /v1/payments/{id}/refunds`, without HTTP),
1 minor unit per refund so the hot payment never runs out. Checked after each run: the
payments' reserved totals equal their refunds, and `paycore ledger verify` passes.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.ledger import service as ledger
from paycore.ledger.verify import verify
from paycore.payments import service as payments
from paycore.refunds import service as refunds
from paycore.refunds.service import NewRefund

TENANT = "bench"
PAYMENT_AMOUNT_MINOR = 10**12


def setup(database: Database, count: int) -> list[str]:
    def work(connection: object) -> list[str]:
        merchant = ledger.create_account(
            connection,
            TENANT,
            code="merchant",
            currency="USD",
            normal_balance="credit",  # type: ignore[arg-type]
            no_overdraft=False,
            metadata={},
            now_us=1,
        ).id
        ids = [f"pay_bench_{index}" for index in range(count)]
        for payment_id in ids:
            payments.import_settled_payment(
                connection,
                TENANT,
                payment_id=payment_id,
                amount_minor=PAYMENT_AMOUNT_MINOR,  # type: ignore[arg-type]
                currency="USD",
                destination_account_id=merchant,
                now_us=1,
            )
        return ids

    return database.transaction(work)  # type: ignore[arg-type]


def measure(database: Database, payment_ids: list[str], clients: int, seconds: int) -> tuple[float, int]:
    stop_at = time.monotonic() + seconds
    done = itertools.count()
    counts = [0] * clients

    def client(index: int) -> None:
        while time.monotonic() < stop_at:
            target = payment_ids[next(done) % len(payment_ids)]  # one payment: every client on it
            database.transaction(
                lambda connection, target=target: refunds.create_refund(
                    connection, TENANT, NewRefund(target, 1), actor="local", now_us=time.time_ns() // 1000
                )
            )
            counts[index] += 1

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return sum(counts) / elapsed, sum(counts)


def check(database: Database) -> str:
    from sqlalchemy import text

    with database.read() as connection:
        bad = connection.execute(
            text(
                "SELECT COUNT(*) FROM payments p WHERE p.refunded_minor <> "
                "(SELECT COALESCE(SUM(amount_minor), 0) FROM refunds r WHERE r.tenant_id = p.tenant_id "
                "AND r.payment_id = p.id AND r.status NOT IN ('failed', 'canceled'))"
            )
        ).scalar_one()
        report = verify(connection)
    return "ok" if bad == 0 and report.ok else f"BROKEN: {bad} payments off; verify {report.problems[:2]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    args = parser.parse_args()
    rows: list[tuple[str, int, str, int, float, int, str]] = []
    workdir = Path(tempfile.mkdtemp(prefix="paycore-refbench-"))
    for backend in args.backends.split(","):
        for clients in [int(c) for c in args.clients.split(",")]:
            for shape in ("hot", "many"):
                for repeat in range(1, args.repeat + 1):
                    name = None
                    if backend == "sqlite":
                        url = f"sqlite:///{workdir / f'{shape}-{clients}-{repeat}.db'}"
                    else:
                        name = common.new_postgres_database(args.postgres_url, "refb")
                        url = common.postgres_database_url(args.postgres_url, name)
                    database = Database(Settings(database_url=url, db_pool_size=max(4, clients + 2)))
                    try:
                        migrate.upgrade(database)
                        ids = setup(database, 1 if shape == "hot" else 64)
                        rate, total = measure(database, ids, clients, args.seconds)
                        rows.append((backend, clients, shape, repeat, rate, total, check(database)))
                        print(rows[-1], flush=True)
                    finally:
                        database.dispose()
                        if name is not None:
                            common.drop_postgres_database(args.postgres_url, name)
    summary = []
    for backend in args.backends.split(","):
        for clients in [int(c) for c in args.clients.split(",")]:
            hot, many = (
                common.median([r[4] for r in rows if r[:3] == (backend, clients, shape)]) for shape in ("hot", "many")
            )
            ratio = common.fmt_ratio(common.ratio(hot, many))
            summary.append([backend, clients, common.fmt(hot), common.fmt(many), ratio])
    table = [
        [b, c, shape, repeat, common.fmt(rate), total, verdict] for b, c, shape, repeat, rate, total, verdict in rows
    ]
    report = [
        "## Refunds (bench/refunds_hot_payment_bench.py)",
        "",
        f"Command: `{common.command_line()}`",
        "",
        common.facts_table(common.machine_facts()),
        "",
        common.markdown_table(["backend", "clients", "shape", "repeat", "refunds/s", "refunds", "check"], table),
        "",
        common.markdown_table(["backend", "clients", "hot median/s", "many median/s", "hot / many"], summary),
    ]
    print("\n".join(report))


if __name__ == "__main__":
    main()
