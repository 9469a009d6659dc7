"""The payout loss report (SPEC §11, docs/losses.md) at 1,000,000 payouts: latency of the
report's statements and their plans, on PostgreSQL (and SQLite).

    .venv/bin/python bench/loss_report_bench.py [--payouts 1000000] [--repeats 5] [--backends postgres,sqlite] [--docs]

THE FIXTURE IS WRITTEN DIRECTLY, BYPASSING THE SERVICE: one `INSERT ... SELECT` per table
(PostgreSQL: from `generate_series`; SQLite: from a recursive CTE) into a database of its own,
created and dropped by this script. Going through `payouts.service` would write a million
ledger transfers, holds and audit events first (hours on this machine), and the report reads
none of them: it reads `payouts` and `payout_adjustments` only. The rows are shaped as the
service writes them (same columns, kinds, dedupe keys, statuses), without ledger transfers.

The data: 1,000,000 payouts (99% in tenant `bench`, 1% in `other`), two thirds ACH in USD,
one third SEPA in EUR, one execution day each spread over 2025-2026, and about 1.5
adjustments per payout: a fee on every one, a return (with its fee) on 10%, a chargeback on
10% (half recovered, a quarter reversed), a fee reversal on 10%, a refund on 2%. After the
load: VACUUM ANALYZE on PostgreSQL (as autovacuum would, for the index-only scans' visibility
map); nothing on SQLite, which keeps no statistics unless told to (paycore never runs ANALYZE:
its plans must be good without).

Measured, each `--repeats` times through `paycore.reports.losses` (the API's code path: one
read transaction and ONE statement per run, giving a page of 100 rows and the totals of the
whole set), median reported: tenant `bench` over all time (first page, and the second page
by cursor) and over one month; every tenant (the CLI's form). Then `EXPLAIN (ANALYZE,
BUFFERS)` (SQLite: EXPLAIN QUERY PLAN) of the all-time and one-month first pages. `--docs`
writes the report to docs/benchmarks-losses.md (the summary is in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sqlalchemy import text

import _common as common
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.payouts import states
from paycore.reports import losses
from paycore.reports.losses import Cursor, LossFilters

TENANT = "bench"
DOCS = common.REPO / "docs" / "benchmarks-losses.md"
PAGE_ROWS = 100
MONTH = ("2026-06-01", "2026-06-30")

# Per dialect: the numbers 1..:n, a zero-padded id, and day arithmetic on YYYY-MM-DD strings.
_DIALECT = {
    "postgresql": {
        "numbers": "generate_series(CAST(1 AS BIGINT), CAST(:n AS BIGINT)) AS s(n)",
        "pad": "lpad(CAST(n AS TEXT), 12, '0')",
        "day": "CAST(DATE '2025-01-01' + CAST(n % 730 + {offset} AS INTEGER) AS TEXT)",
    },
    "sqlite": {
        "numbers": "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < :n) SELECT n FROM s)",
        "pad": "printf('%012d', n)",
        "day": "date('2025-01-01', '+' || (n % 730 + {offset}) || ' days')",
    },
}
# The payout's columns, from n. ACH (USD) unless n % 3 = 0 (SEPA, EUR).
_PAYOUTS = """
INSERT INTO payouts (tenant_id, id, idempotency_key, amount_minor, currency, rail, source_account_id,
    beneficiary_name, iban, bic, routing_number, account_number, execute_on, metadata, status, failure_code,
    return_code, transfer_id, bank_reference, batch_id, attempts, next_attempt_at_us, claimed_by,
    claimed_until_us, in_doubt_since_us, sent_at_us, settled_at_us, returned_at_us, created_at_us, updated_at_us)
SELECT
    CASE WHEN n % 100 = 0 THEN 'other' ELSE 'bench' END,
    'po_' || {pad}, NULL, 1000 + (n * 7919) % 500000,
    CASE WHEN n % 3 = 0 THEN 'EUR' ELSE 'USD' END, CASE WHEN n % 3 = 0 THEN 'sepa' ELSE 'ach' END,
    'acct_bench_source', 'Beneficiary ' || n,
    CASE WHEN n % 3 = 0 THEN 'DE89370400440532013000' ELSE NULL END, NULL,
    CASE WHEN n % 3 = 0 THEN NULL ELSE '011000015' END, CASE WHEN n % 3 = 0 THEN NULL ELSE '123456789' END,
    {day0}, '{{}}', CASE WHEN n % 10 = 1 THEN '{returned}' ELSE '{settled}' END, NULL,
    CASE WHEN n % 10 = 1 THEN 'R01' ELSE NULL END, 'txn_bench_' || n, 'bank_' || n, NULL, 1, NULL, NULL,
    NULL, NULL, 1, 1, NULL, 1, 1
FROM {numbers}
"""
# (kind, which payouts, amount, days after execute_on, dedupe key)
_KINDS = (
    ("fee", "1 = 1", "CASE WHEN n % 3 = 0 THEN 20 ELSE 25 END", 1, "bank:fee"),
    ("return", "n % 10 = 1", "1000 + (n * 7919) % 500000 - CASE WHEN n % 3 = 0 THEN 100 ELSE 0 END", 2, "bank:return"),
    ("return_fee", "n % 10 = 1", "CASE WHEN n % 3 = 0 THEN 500 ELSE 200 END", 2, "bank:return_fee"),
    ("chargeback", "n % 10 = 2", "1000 + (n * 7919) % 500000", 15, "key:cb"),
    ("recovery", "n % 20 = 2", "500 + (n * 7919) % 500000", 40, "key:rec"),
    ("chargeback_reversal", "n % 40 = 12", "1000 + (n * 7919) % 500000", 60, "key:cbr"),
    ("fee_reversal", "n % 10 = 3", "CASE WHEN n % 3 = 0 THEN 20 ELSE 25 END", 30, "key:fr"),
    ("refund", "n % 50 = 1", "50", 20, "key:ref"),
)
_ADJUSTMENTS = """
INSERT INTO payout_adjustments (tenant_id, id, payout_id, kind, amount_minor, currency, code, effective_on, source,
    dedupe_key, transfer_id, note, created_at_us)
SELECT
    CASE WHEN n % 100 = 0 THEN 'other' ELSE 'bench' END,
    'adj_{kind}_' || n, 'po_' || {pad}, '{kind}', {amount}, CASE WHEN n % 3 = 0 THEN 'EUR' ELSE 'USD' END, NULL,
    {day}, '{source}', '{dedupe}', 'txn_bench_{kind}_' || n, NULL, 1
FROM {numbers}
WHERE {where}
"""


def load(database: Database, payouts: int) -> dict[str, float]:
    """Write the fixture (directly, see the module docstring); returns seconds per step."""
    sql = _DIALECT[database.dialect]
    timings: dict[str, float] = {}

    def timed(name: str, statement: str) -> None:
        began = time.perf_counter()
        database.transaction(lambda connection: connection.execute(text(statement), {"n": payouts}))
        timings[name] = time.perf_counter() - began
        print(f"  {name}: {timings[name]:.1f} s", file=sys.stderr, flush=True)

    day0 = sql["day"].format(offset=0)
    statuses = {"returned": states.RETURNED, "settled": states.SETTLED}  # as stored
    timed("payouts", _PAYOUTS.format(pad=sql["pad"], day0=day0, numbers=sql["numbers"], **statuses))
    for kind, where, amount, offset, dedupe in _KINDS:
        source = "bank" if dedupe.startswith("bank:") else "api"
        statement = _ADJUSTMENTS.format(
            kind=kind,
            pad=sql["pad"],
            amount=amount,
            day=sql["day"].format(offset=offset),
            source=source,
            dedupe=dedupe,
            numbers=sql["numbers"],
            where=where,
        )
        timed(f"adjustments {kind}", statement)
    if database.is_postgres:  # what autovacuum would do soon after such a load
        began = time.perf_counter()
        with database.engine.connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")
        timings["vacuum analyze"] = time.perf_counter() - began
    return timings


def counts(database: Database) -> tuple[int, int]:
    with database.read() as connection:
        found = connection.execute(text("SELECT COUNT(*) FROM payouts")).scalar_one()
        adjusted = connection.execute(text("SELECT COUNT(*) FROM payout_adjustments")).scalar_one()
    return int(found), int(adjusted)


def measure(database: Database, repeats: int) -> list[tuple[str, float, str]]:
    """(case, median ms, what came back) per case: each run is one API answer (a page and the
    totals of the whole set: one statement) in its own read transaction."""
    tenant = losses.parse_filters(TENANT)
    month = losses.parse_filters(TENANT, from_day=MONTH[0], to_day=MONTH[1])
    everyone = losses.parse_filters(None)
    with database.read() as connection:
        losses.begin_report(connection)
        second = losses.report(connection, tenant, after=None, limit=PAGE_ROWS).rows[-1].cursor
    cases: list[tuple[str, LossFilters, Cursor | None]] = [
        ("tenant, all time, page 1", tenant, None),
        ("tenant, all time, page 2 (starting_after)", tenant, second),
        (f"tenant, one month ({MONTH[0]}..{MONTH[1]}), page 1", month, None),
        ("every tenant (the CLI's form), all time, page 1", everyone, None),
    ]
    results = []
    for name, filters, after in cases:
        samples, answer = [], None
        for _ in range(repeats):
            with database.read() as connection:
                began = time.perf_counter()
                losses.begin_report(connection)
                answer = losses.report(connection, filters, after=after, limit=PAGE_ROWS)
                samples.append((time.perf_counter() - began) * 1000)
        assert answer is not None
        print(f"  {name}: median {statistics.median(samples):,.0f} ms of {len(samples)}", file=sys.stderr)
        results.append((name, statistics.median(samples), _summary(answer)))
    return results


def _summary(answer: losses.LossReport) -> str:
    top = f"top {answer.rows[0].loss_minor} {answer.rows[0].currency}" if answer.rows else "no rows"
    totals = "; ".join(f"{t.currency} {t.loss_minor} over {t.payouts:,} payouts" for t in answer.totals)
    return f"{len(answer.rows)} rows ({top}), has_more={answer.has_more}; totals {totals}"


def plans(database: Database) -> list[tuple[str, str]]:
    parameters = {
        "tenant_id": TENANT,
        "from_day": losses.FIRST_DAY,
        "to_day": losses.LAST_DAY,
        "rail": None,
        "currency": None,
        "after_tenant_id": None,
        "after_payout_id": None,
        "row_limit": PAGE_ROWS + 1,
    }
    month = {**parameters, "from_day": MONTH[0], "to_day": MONTH[1]}
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if database.is_postgres else "EXPLAIN QUERY PLAN "
    found = []
    for name, values in (("tenant, all time, page 1", parameters), ("tenant, one month, page 1", month)):
        with database.read() as connection:
            losses.begin_report(connection)
            lines = connection.execute(text(prefix + losses.REPORT_SQL), values).all()
        found.append((name, "\n".join(" | ".join(str(cell) for cell in line) for line in lines)))
    return found


def run_backend(backend: str, args: argparse.Namespace) -> list[str]:
    name = None
    if backend == "postgres":
        name = common.new_postgres_database(args.postgres_url, "losses")
        url = common.postgres_database_url(args.postgres_url, name)
    else:
        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='paycore-lossbench-')) / 'losses.db'}"
    database = Database(Settings(database_url=url, db_pool_size=2, statement_timeout_ms=600_000))
    try:
        print(f"{backend}: migrate, load {args.payouts:,} payouts", file=sys.stderr, flush=True)
        migrate.upgrade(database)
        loaded = load(database, args.payouts)
        payouts, adjustments = counts(database)
        results = measure(database, args.repeats)
        found_plans = plans(database)
    finally:
        database.dispose()
        if name is not None and not args.keep:
            common.drop_postgres_database(args.postgres_url, name)
    load_s = sum(loaded.values())
    lines = [
        f"### {backend}: {payouts:,} payouts, {adjustments:,} adjustments "
        f"({adjustments / payouts:.2f} per payout), loaded in {load_s:,.0f} s",
        "",
        common.markdown_table(
            ["report (one statement: a page of 100 and the totals)", f"median of {args.repeats} (ms)", "answer"],
            [(case, f"{median_ms:,.0f}", answer) for case, median_ms, answer in results],
        ),
        "",
    ]
    for title, plan in found_plans:
        lines += [f"Plan, {title}:", "", "```", plan, "```", ""]
    return lines


HEADER = [
    "# The loss report at a million payouts: the last `bench/loss_report_bench.py --docs` run",
    "",
    "For whoever checks the loss report's speed: the last full run's timings, answers and query",
    "plans, written by the script (`--docs` replaces this whole file). What the figures mean and",
    "what bounds them: [benchmarks.md](benchmarks.md#loss-report-spec-11).",
    "",
]


def write_docs(report: list[str]) -> None:
    """Replace docs/benchmarks-losses.md with this run's report. It lives in a file of its own,
    because its plans are longer than the whole reference page (docs/benchmarks.md), which
    keeps the figures and what bounds them."""
    DOCS.write_text("\n".join([*HEADER, *report]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payouts", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backends", default="postgres,sqlite")
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL database (bench_losses_*)")
    parser.add_argument("--docs", action="store_true", help="write the report to docs/benchmarks-losses.md")
    args = parser.parse_args()
    began = time.monotonic()
    extra = common.postgres_facts(args.postgres_url) if "postgres" in args.backends else []
    report = [
        "Run by the script; the fixture is written directly with `INSERT ... SELECT`, bypassing the",
        "service (see the script's docstring for why and for the data's shape).",
        "",
        common.facts_table(common.machine_facts(extra)),
        "",
    ]
    for backend in args.backends.split(","):
        report += run_backend(backend, args)
    report.append(
        f"Load average at the end (1/5/15 min): {common.load_average()}; whole run {time.monotonic() - began:,.0f} s."
    )
    print("\n".join(report))
    if args.docs:
        write_docs(report)


if __name__ == "__main__":
    main()
