"""Issue 28: every page of the operations console (`/ops`) under 200 ms with 100,000 payments in
the database, on SQLite and on PostgreSQL.

    .venv/bin/python bench/console_pages_bench.py [--backend both] [--payments 100000] [--rounds 3] [--requests 10]

For each backend: a scratch database (a SQLite file in `--workdir`; a `bench_console_*` database
on PostgreSQL, dropped at the end), migrated to head, filled by `_console_fixture.py` (its
docstring has the mix: a month of payments over four tenants, their audit events, refunds,
payouts, reconciliation runs and breaks, bulk-inserted; the objects whose pages are opened made
by the services) and, on PostgreSQL, `VACUUM ANALYZE` (what autovacuum would do; SQLite gets no
ANALYZE: paycore never runs it). Then the pages a person opens, in local mode (no API key, no
operator: the console opens without signing in), through paycore's ASGI app
(`fastapi.testclient.TestClient(create_app(settings, database))`: the whole app, middleware
and rendering included, no socket).

Timing: each page `--warmup` times unmeasured, then `--requests` times per round, `--rounds`
rounds; in every round the backends alternate (their order flips each round) and each backend
runs every page in turn, so a drift of the shared machine touches all alike. Reported per page:
median, p90 and max over all rounds' requests, and "< 200 ms: met / NOT met" on the median
(p90 beside it). Every answer is checked (a failed check makes the exit status 1): status 200,
and what the page must show (the list's 50 rows and its next page, the searched id, the
timeline's transfer, ...).

`--statements`: after the timing, one request per page with every SQL statement timed
(SQLAlchemy's cursor events): the page's statement count, their summed time and the slowest.
`--explain`: the plan of each page's slowest statement (PostgreSQL `EXPLAIN (ANALYZE, BUFFERS)`,
SQLite `EXPLAIN QUERY PLAN`), with its parameters.

The report (machine facts, the command, one table per backend, the checks) goes to stdout;
progress to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fastapi.testclient import TestClient
from sqlalchemy import event, text

import _common as common
import _console_fixture as fixture
from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox

TARGET_MS: Final = 200.0
_ROW: Final = re.compile(r'<tr>\s*<td><a href="/ops/(?:payments|refunds|payouts|disputes)/')
_NEXT: Final = re.compile(r'rel="next" href="([^"]+)"')
REPORT_ROUTES: Final = (
    "/ops/losses",
    "/ops/ledger",
    "/ops/ledger/accounts/{account_id}",
    "/ops/webhooks",
    "/ops/audit",
)


@dataclass
class Page:
    name: str
    path: str
    check: Callable[[str], str | None]  # the body -> None, or what is wrong
    status: int = 200  # a search naming one object by its id answers 303 to its page


def _rows(expected: int) -> Callable[[str], str | None]:
    def check(body: str) -> str | None:
        found = len(_ROW.findall(body))
        return None if found == expected else f"{found} rows, expected {expected}"

    return check


def _at_least_rows(minimum: int) -> Callable[[str], str | None]:
    def check(body: str) -> str | None:
        found = len(_ROW.findall(body))
        return None if found >= minimum else f"{found} rows, expected at least {minimum}"

    return check


def _holds(*needles: str) -> Callable[[str], str | None]:
    def check(body: str) -> str | None:
        missing = [needle for needle in needles if needle not in body]
        return None if not missing else f"missing {missing}"

    return check


def _first_row(needle: str) -> Callable[[str], str | None]:
    def check(body: str) -> str | None:
        found = len(_ROW.findall(body))
        if found != 1 or needle not in body:
            return f"{found} rows, expected the one {needle}"
        return None

    return check


def pages_of(client: TestClient, made: fixture.Made, *, full: bool) -> list[Page]:
    """The pages timed. `full`: the fixture is large enough (20,000 payments or more) that every
    filtered list has a whole page of 50 rows."""
    whole = _rows(50) if full else _at_least_rows(1)
    first = client.get("/ops/payments")
    found = _NEXT.search(first.text)
    assert first.status_code == 200 and found is not None, "the first page of payments has no next page"
    second = found.group(1).replace("&amp;", "&")
    day = made.day
    pages = [
        Page("overview", "/ops", _holds("payment", "refund", "payout")),
        Page("payments", "/ops/payments", _rows(50)),
        Page("payments, status=in_doubt", "/ops/payments?status=in_doubt", whole),
        Page("payments, tenant", f"/ops/payments?tenant={made.tenant}", _rows(50)),
        Page("payments, one day", f"/ops/payments?from={day}&to={day}", _rows(50)),
        Page("payments, amount range", "/ops/payments?currency=USD&min=10&max=15", whole),
        Page("payments, q=id", f"/ops/payments?q={made.bulk_payment_id}", _first_row(made.bulk_payment_id)),
        Page(
            "payments, q=processor ref",
            f"/ops/payments?q={made.bulk_processor_reference}",
            _first_row(made.bulk_payment_id),
        ),
        Page("payments, page 2", second, _rows(50)),
        Page("refunds", "/ops/refunds", whole),
        Page("payouts", "/ops/payouts", _rows(50)),
        Page("payment timeline", f"/ops/payments/{made.payment_id}", _holds(made.refund_id, "transfer txn_")),
        Page("refund timeline", f"/ops/refunds/{made.refund_id}", _holds(made.payment_id, "transfer txn_")),
        Page("payout timeline", f"/ops/payouts/{made.payout_id}", _holds("transfer txn_")),
        Page("in doubt", "/ops/in-doubt", _holds(made.oldest_in_doubt_payment_id)),
        Page("approvals", "/ops/approvals", _holds(made.approval_refund_id)),
        Page("disputes", "/ops/disputes", whole),
        Page("disputes, status=closed", "/ops/disputes?status=closed", whole),
        Page("disputes, tenant", f"/ops/disputes?tenant={made.tenant}", whole),
        Page(
            "a dispute", f"/ops/disputes/{made.dispute_id}", _holds(made.dispute_id, "transfer txn_", "evidence-form")
        ),
        Page("reconciliation", "/ops/reconciliation", _holds("amount_mismatch")),
        Page("a break", f"/ops/reconciliation/breaks/{made.break_id}", _holds(made.break_id)),
        Page("/metrics", "/metrics", _holds("paycore_")),
    ]
    # The report pages (reports.py), where this checkout has them (a 404: no such route).
    reports = [
        Page("losses", "/ops/losses", _holds("</html>")),
        Page("ledger", "/ops/ledger", _holds(made.account_id)),
        Page("account statement", f"/ops/ledger/accounts/{made.account_id}", _holds(made.account_id, "txn_")),
        Page("search, id (a 303 to its page)", f"/ops/search?q={made.bulk_payment_id}", _holds(), status=303),
        Page("search, processor ref", f"/ops/search?q={made.bulk_processor_reference}", _holds(made.bulk_payment_id)),
        Page("search, no match (metadata window read)", "/ops/search?q=no-such-value", _holds("nothing-found")),
        Page("webhooks", "/ops/webhooks", _holds("127.0.0.1:9/bench")),
        Page("audit", "/ops/audit", _holds("evt_")),
        Page("audit, object", f"/ops/audit?object_id={made.bulk_payment_id}", _holds("processor.charge")),
        Page("audit, actor", "/ops/audit?actor=operator:alice", _holds("refund.requires_approval")),
        Page("audit, tenant", f"/ops/audit?tenant={made.tenant}", _holds("evt_")),
    ]
    return pages + [page for page in reports if client.get(page.path).status_code != 404]


def report_routes(backend: Backend) -> list[str]:
    """The report pages' routes this checkout has (reports.py is issue 28's last part)."""
    timed = {page.path.split("?")[0].replace(backend.made.account_id, "{account_id}") for page in backend.pages}
    return [route for route in REPORT_ROUTES if route in timed]


# ---------------------------------------------------------------------------- statements


@dataclass
class Statement:
    sql: str
    parameters: Any
    ms: float


@dataclass
class Recorder:
    """Every statement's SQL, parameters and time while `on` (SQLAlchemy's cursor events)."""

    on: bool = False
    found: list[Statement] = field(default_factory=list)

    def install(self, database: Database) -> None:
        def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
            conn.info["bench_began"] = time.perf_counter()

        def after(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
            if self.on:
                took = (time.perf_counter() - conn.info.pop("bench_began", time.perf_counter())) * 1000
                self.found.append(Statement(statement, parameters, took))

        event.listen(database.engine, "before_cursor_execute", before)
        event.listen(database.engine, "after_cursor_execute", after)

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[Statement]]:
        self.found, self.on = [], True
        try:
            yield self.found
        finally:
            self.on = False


def explain(database: Database, statement: Statement) -> str:
    raw = database.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if database.is_postgres:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, statement.parameters)
            lines = [row[0] for row in cursor.fetchall()]
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + statement.sql, statement.parameters)
            lines = [f"{row[0]:>3} {row[1]:>3} {row[3]}" for row in cursor.fetchall()]
        raw.rollback()
        return "\n".join(lines)
    finally:
        raw.close()


# ---------------------------------------------------------------------------- backends


@dataclass
class Backend:
    name: str
    database: Database
    client: TestClient
    made: fixture.Made
    recorder: Recorder
    pages: list[Page] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    build_s: float = 0.0


def open_backend(name: str, args: argparse.Namespace, workdir: Path, cleanup: contextlib.ExitStack) -> Backend:
    if name == "sqlite":
        url = f"sqlite:///{workdir / 'console.db'}"
    else:
        database_name = common.new_postgres_database(args.postgres_url, "console")
        if not args.keep:
            cleanup.callback(common.drop_postgres_database, args.postgres_url, database_name)
        url = common.postgres_database_url(args.postgres_url, database_name)
        fixture.log(f"{name}: database {database_name}")
    settings = Settings(database_url=url)
    database = Database(settings)
    cleanup.callback(database.dispose)
    began = time.perf_counter()
    migrate.upgrade(database)
    sandbox = Sandbox.open(f"sqlite:///{workdir / f'sandbox-{name}.db'}")
    cleanup.callback(sandbox.close)
    processor = InProcessTransport(sandbox, timeout_ms=5_000)
    fixture.log(f"{name}: building the fixture ({args.payments:,} payments)")
    made = fixture.build(database, processor, payments_count=args.payments, payouts_count=args.payouts)
    build_s = time.perf_counter() - began
    fixture.log(f"{name}: fixture built in {build_s:.0f} s")
    client = cleanup.enter_context(TestClient(create_app(settings, database, processor), follow_redirects=False))
    recorder = Recorder()
    recorder.install(database)
    backend = Backend(name, database, client, made, recorder, build_s=build_s)
    backend.counts = table_counts(database)
    backend.pages = pages_of(client, made, full=args.payments >= 20_000)
    return backend


def table_counts(database: Database) -> dict[str, int]:
    with database.read() as connection:
        return {
            table: int(connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
            for table in (
                "payments",
                "events",
                "refunds",
                "payouts",
                "reconciliation_breaks",
                "disputes",
                "ledger_transfers",
            )
        }


def request(backend: Backend, page: Page) -> float:
    began = time.perf_counter()
    response = backend.client.get(page.path)
    took = (time.perf_counter() - began) * 1000
    problem = f"status {response.status_code}" if response.status_code != page.status else page.check(response.text)
    if problem is not None:
        backend.failures.append(f"{page.name} ({page.path}): {problem}")
    return took


def time_round(backend: Backend, requests: int) -> None:
    for page in backend.pages:
        backend.samples.setdefault(page.name, []).extend(request(backend, page) for _ in range(requests))


# ---------------------------------------------------------------------------- write cost

# Migration 0017's indexes: what they cost each payment (the "without" side drops them).
WRITE_INDEXES: Final = ("ix_payments_id", "ix_events_id", "ix_events_object_id", "ix_events_actor")
WRITE_LABEL: Final = "migration 0017's indexes"


@dataclass
class WriteSide:
    label: str
    database: Database
    pay: Callable[[int], None]
    recorder: Recorder
    ms_per_payment: list[float] = field(default_factory=list)
    insert_ms: list[float] = field(default_factory=list)  # INSERT INTO payments
    update_ms: list[float] = field(default_factory=list)  # UPDATE payments (the status changes)
    events_ms: list[float] = field(default_factory=list)  # INSERT INTO events


def write_side(
    name: str, label: str, args: argparse.Namespace, workdir: Path, cleanup: contextlib.ExitStack
) -> WriteSide:
    from paycore.http.errors import render_refusal
    from paycore.idempotency.service import KeyScope
    from paycore.kit.clock import now_us
    from paycore.ledger import service as ledger
    from paycore.payments import service as payments
    from paycore.payments.types import NewPayment

    if name == "sqlite":
        url = f"sqlite:///{workdir / f'write-{label}.db'}"
    else:
        database_name = common.new_postgres_database(args.postgres_url, "console")
        cleanup.callback(common.drop_postgres_database, args.postgres_url, database_name)
        url = common.postgres_database_url(args.postgres_url, database_name)
    database = Database(Settings(database_url=url))
    cleanup.callback(database.dispose)
    migrate.upgrade(database)
    if label == "without":
        for index in WRITE_INDEXES:
            database.transaction(lambda connection, index=index: connection.exec_driver_sql(f"DROP INDEX {index}"))
    sandbox = Sandbox.open(f"sqlite:///{workdir / f'write-sandbox-{name}-{label}.db'}")
    cleanup.callback(sandbox.close)
    processor = InProcessTransport(sandbox, timeout_ms=5_000)
    account = database.transaction(
        lambda connection: ledger.create_account(
            connection, "bench-w", code="merchant.USD", currency="USD", normal_balance="credit",
            no_overdraft=False, metadata={}, now_us=now_us(),
        )
    ).id  # fmt: skip
    timings = payments.PaymentTimings(processing_stale_ms=60_000, wait_ms=10_000, first_retry_ms=60_000)
    new = NewPayment(1_000, "USD", "card", "tok_ok", account, None, {}, "local")

    def pay(index: int) -> None:
        scope = KeyScope("bench-w", f"w-{index}", "bench", now_us(), None)
        payments.create_payment(database, processor, scope, new, timings=timings, render_refusal=render_refusal)

    recorder = Recorder()
    recorder.install(database)
    return WriteSide(label, database, pay, recorder)


def write_cost(name: str, args: argparse.Namespace, workdir: Path) -> str:
    """Payments made in-process through the services (in-process sandbox, no HTTP), on two fresh
    databases at head, one with the index dropped; rounds alternate the two (order flipping)."""
    with contextlib.ExitStack() as cleanup:
        sides = [write_side(name, label, args, workdir, cleanup) for label in ("with", "without")]
        counter = 0
        for side in sides:  # warm-up: imports, caches, the first pages of each B-tree
            for _ in range(50):
                side.pay(counter)
                counter += 1
        for round_number in range(args.rounds):
            order = sides if round_number % 2 == 0 else list(reversed(sides))
            for side in order:
                fixture.log(f"write cost {name}, round {round_number + 1}/{args.rounds}: {side.label} {WRITE_LABEL}")
                with side.recorder.recording() as found:
                    began = time.perf_counter()
                    for _ in range(args.write_cost):
                        side.pay(counter)
                        counter += 1
                    side.ms_per_payment.append((time.perf_counter() - began) * 1000 / args.write_cost)
                side.insert_ms += [s.ms for s in found if s.sql.lstrip().startswith("INSERT INTO payments")]
                side.update_ms += [s.ms for s in found if s.sql.lstrip().startswith("UPDATE payments")]
                side.events_ms += [s.ms for s in found if s.sql.lstrip().startswith("INSERT INTO events")]
    rows = []
    for side in sides:
        each = ", ".join(f"{value:.2f}" for value in side.ms_per_payment)
        rows.append(
            [
                f"{side.label} {WRITE_LABEL}",
                f"{common.median(side.ms_per_payment):.2f} ({each})",
                f"{common.median(side.insert_ms) * 1000:.0f}",
                f"{common.median(side.update_ms) * 1000:.0f}",
                f"{common.median(side.events_ms) * 1000:.0f}",
            ]
        )
    headers = [
        "schema",
        "ms per payment: median (each round)",
        "INSERT INTO payments µs",
        "UPDATE payments µs",
        "INSERT INTO events µs",
    ]
    return (
        f"### {name}: what {WRITE_LABEL} ({', '.join(WRITE_INDEXES)}) cost a payment\n\n"
        f"{args.rounds} rounds x {args.write_cost} payments per side (after 50 unmeasured), in-process"
        " through `payments.service.create_payment` and the sandbox;"
        " statement times are medians over every payment's statements (SQLAlchemy cursor events).\n\n"
        + common.markdown_table(headers, rows)
    )


# ---------------------------------------------------------------------------- report


def backend_table(backend: Backend, rounds: int) -> str:
    rows = []
    for page in backend.pages:
        samples = sorted(backend.samples[page.name])
        p50, p90 = common.median(samples), common.percentile(samples, 0.9)
        met = "met" if p50 is not None and p50 < TARGET_MS else "**NOT met**"
        path = page.path if len(page.path) <= 60 else page.path[:57] + "..."
        rows.append([page.name, f"`{path}`", common.fmt(p50, 1), common.fmt(p90, 1), common.fmt(samples[-1], 1), met])
    return common.markdown_table(
        ["page", "path", "median ms", "p90 ms", "max ms", f"< {TARGET_MS:.0f} ms (median)"], rows
    )


def statements_report(backend: Backend, explain_plans: bool) -> str:
    out = [f"### {backend.name}: SQL per page (one request each)", ""]
    rows = []
    plans = []
    for page in backend.pages:
        with backend.recorder.recording() as found:
            request(backend, page)
        total = sum(statement.ms for statement in found)
        slowest = max(found, key=lambda statement: statement.ms, default=None)
        head = "" if slowest is None else " ".join(slowest.sql.split())[:90]
        rows.append(
            [page.name, len(found), f"{total:.1f}", "" if slowest is None else f"{slowest.ms:.1f}", f"`{head}`"]
        )
        if explain_plans and slowest is not None and slowest.ms >= 5:
            sql = " ".join(slowest.sql.split())
            plans.append(
                f"#### {page.name}: {slowest.ms:.1f} ms\n\n    {sql}\n    -- {slowest.parameters}\n\n"
                + "\n".join("    " + line for line in explain(backend.database, slowest).splitlines())
            )
    out.append(common.markdown_table(["page", "statements", "SQL ms", "slowest ms", "slowest statement"], rows))
    if plans:
        out += ["", *plans]
    return "\n".join(out)


def git_head() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=common.REPO, capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=common.REPO, capture_output=True, text=True
    )
    return done.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--payments", type=int, default=100_000)
    parser.add_argument("--payouts", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=10, help="per page, backend and round")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured requests per page and backend")
    parser.add_argument("--statements", action="store_true", help="time each page's SQL statements once")
    parser.add_argument("--explain", action="store_true", help="with --statements: each page's slowest plan")
    parser.add_argument(
        "--write-cost",
        type=int,
        default=0,
        metavar="N",
        help=f"then N payments per round with and without {WRITE_LABEL}, alternated (0: not measured)",
    )
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file and the PostgreSQL database")
    args = parser.parse_args()
    names = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="paycore-console-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    facts = common.machine_facts(
        [
            ("commit", git_head()),
            ("SQLite file's filesystem", common.filesystem_of(workdir)),
            ("fsync probe", common.fsync_probe(workdir)),
        ]
    )
    if "postgres" in names:
        facts += common.postgres_facts(args.postgres_url)
    with contextlib.ExitStack() as cleanup:
        backends = [open_backend(name, args, workdir, cleanup) for name in names]
        load_after_build = common.load_average()
        for backend in backends:
            for page in backend.pages:
                for _ in range(args.warmup):
                    request(backend, page)
        for round_number in range(args.rounds):
            order = backends if round_number % 2 == 0 else list(reversed(backends))
            for backend in order:
                fixture.log(f"round {round_number + 1}/{args.rounds}: {backend.name}")
                time_round(backend, args.requests)
        facts.append(("load average after the build (1/5/15 min)", load_after_build))
        facts.append(("load average at end (1/5/15 min)", common.load_average()))
        out = ["# Operations console pages (issue 28)", "", common.facts_table(facts), ""]
        present = report_routes(backends[0])
        missing = [route for route in REPORT_ROUTES if route not in present]
        out.append(
            "Report pages: " + ("all present" if not missing else f"not in this checkout: {', '.join(missing)}") + "."
        )
        out.append(
            f"Each page: {args.warmup} warm-up requests, then {args.rounds} rounds x {args.requests} requests"
            f" ({args.rounds * args.requests} timed), backends alternated per round; TestClient, local mode."
        )
        for backend in backends:
            counts = ", ".join(f"{table} {count:,}" for table, count in backend.counts.items())
            out += ["", f"## {backend.name}", "", f"Rows: {counts}. Fixture built in {backend.build_s:.0f} s.", ""]
            out.append(backend_table(backend, args.rounds))
        if args.statements:
            for backend in backends:
                out += ["", statements_report(backend, args.explain)]
        if args.write_cost:
            out += ["", "## What the console's index costs a write", ""]
            out += ["\n\n".join(write_cost(name, args, workdir) for name in names)]
        failures = Counter(f"{backend.name}: {failure}" for backend in backends for failure in backend.failures)
        out += ["", "## Checks", ""]
        out += [f"- FAILED {failure} ({times}x)" for failure, times in failures.items()]
        out += [] if failures else ["- every answer 200 and as expected: ok"]
        print("\n".join(out))
        if args.keep:
            fixture.log(f"kept: {workdir}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
