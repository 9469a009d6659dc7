#!/usr/bin/env python3
"""Ledger transfers per second, against the physical limit measured in the same run (issue 2).

Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/ledger_bench.py --backend both --clients 1,4 --duration-s 10 --repeats 3

What runs, per backend (a fresh SQLite file in --workdir, or a fresh PostgreSQL database
`bench_ledger_*` that is dropped afterwards), for every client count, --repeats times with
the configurations interleaved (so drift on a noisy machine hits them all alike):

- `raw-commit`: the physical limit. Each client loops `BEGIN; INSERT one row; COMMIT` on a
  small table with the bare driver (sqlite3 / psycopg 3) and paycore's durability settings
  (SQLite: WAL, synchronous=FULL, BEGIN IMMEDIATE, the same busy timeout; PostgreSQL: the
  server's synchronous_commit, which the header shows).
- `engine-commit`: the same one-row INSERT + COMMIT, but through paycore's
  `Database.transaction` (SQLAlchemy pool, connect-time pragmas, PostgreSQL pre-ping): what
  the stack costs before any ledger work.
- `spread`: paycore's money path. Each client loops `paycore.ledger.keyed.create_transfer`
  of a 2-entry transfer (a fresh idempotency key each time, as `POST /v1/transfers` does)
  that debits a `no_overdraft` account funded up front. Each client has its own pair of
  accounts. On PostgreSQL that is one server call per transfer (ADR 0011); on SQLite one
  `Database.transaction` running the data plane's fixed list (ADR 0026,
  `ledger/transfer_repository.py`); a refusal on either takes `idempotency.run(...)` around
  `ledger.create_transfer(...)`.
- `hot`: the same, but every client debits ONE shared hot account (credit-normal,
  no_overdraft, big funding) into its own destination account.
- `spread-tx`, `hot-tx` (PostgreSQL only): the same on the reference path, one transaction of
  eight round trips, which was PostgreSQL's path before ADR 0011: its gain, in the same run.
- `raw-transfer`: the rows of one `spread` transfer (key claim, accounts read, transfer,
  balance UPDATEs with RETURNING, entries, recorded response) written by the bare driver with
  paycore's settings, one transfer per commit (bench/_ledger_floor.py): the floor of a transfer on
  this schema, so the report separates the database's own work from paycore's.

Clients are OS processes (multiprocessing, spawn), so the GIL of one process is not what is
measured. Every client connects and does one operation, then all wait for a common start;
they run --warmup-s seconds unmeasured, then count the operations that complete within the
next --duration-s seconds. After each run the books are checked (keys, transfers, account
balances match what the clients counted), and after all runs `paycore.ledger.verify` must
report ok. Any failed check makes the exit status non-zero.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import secrets
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _common as common

TENANT = "bench"
CURRENCY = "USD"
AMOUNT_MINOR = 1
# Per funded account: far more than any run can spend (10^6 transfers), and small enough that the
# shared funding account stays inside the 2^53 - 1 balance limit after 9,000 fundings (10^15 passed it
# at the ninth, e.g. in bench/run, which prepares accounts once per round and batch size).
FUNDING_MINOR = 10**12
PROBE_TABLE = "bench_commit_probe"
BASELINES = ("raw-commit", "engine-commit")
# These write transfers between prepared accounts. `-tx`: the reference path, PostgreSQL only.
LEDGER_SCENARIOS = ("raw-transfer", "spread", "hot", "spread-tx", "hot-tx")
POSTGRES_ONLY = ("spread-tx", "hot-tx")
SCENARIOS = BASELINES + LEDGER_SCENARIOS
DESCRIPTIONS = {
    "raw-commit": "bare INSERT + COMMIT, driver only (the physical limit)",
    "engine-commit": "bare INSERT + COMMIT through paycore's Database.transaction",
    "raw-transfer": "the rows of one paycore transfer per commit, bare driver, no paycore (the schema's floor)",
    "spread": "paycore transfer (idempotency key + overdraft check), own accounts per client",
    "hot": "paycore transfer, every client debits one hot account",
    "spread-tx": "`spread` on the reference path: one transaction of round trips (before ADR 0011)",
    "hot-tx": "`hot` on the reference path: one transaction of round trips (before ADR 0011)",
}
ERRORS_IN_A_ROW_MAX = 200  # a client that only fails stops, instead of spinning


class BenchFailure(Exception):
    """An operation did not do what the benchmark asked (not a transient database error)."""


@dataclass(frozen=True)
class ClientSpec:
    backend: str
    database_url: str  # SQLAlchemy URL
    libpq_url: str | None  # PostgreSQL only, for raw-commit
    sqlite_path: str | None  # SQLite only, for raw-commit
    scenario: str
    index: int
    tag: str
    duration_s: float
    source_id: str | None = None
    destination_id: str | None = None


@dataclass
class RunResult:
    backend: str
    scenario: str
    clients: int
    repeat: int
    tag: str
    duration_s: float
    committed_in_window: int = 0
    committed_total: int = 0
    per_second: float = 0.0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    durability: list[str] = field(default_factory=list)
    check_problems: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------- client side (child processes)


def _sqlite_durability(read: Callable[[str], Any]) -> str:
    return f"journal_mode={read('PRAGMA journal_mode')}, synchronous={read('PRAGMA synchronous')} (2=FULL)"


def _postgres_durability(read: Callable[[str], Any]) -> str:
    return f"synchronous_commit={read('SHOW synchronous_commit')}, fsync={read('SHOW fsync')}"


def _driver_connection(spec: ClientSpec) -> Any:
    """A bare driver connection with exactly paycore's connection settings."""
    from paycore.config import Settings

    settings = Settings()
    if spec.backend == "sqlite":
        import sqlite3

        assert spec.sqlite_path is not None
        connection = sqlite3.connect(spec.sqlite_path, isolation_level=None)
        # Exactly what paycore.db.engines sets on every SQLite connection.
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute(f"PRAGMA busy_timeout={int(settings.idempotency_wait_ms)}")
        return connection
    import psycopg

    assert spec.libpq_url is not None
    options = (
        f"-c lock_timeout={settings.idempotency_wait_ms} -c statement_timeout={settings.statement_timeout_ms}"
        f" -c idle_in_transaction_session_timeout={settings.statement_timeout_ms * 2}"
    )
    return psycopg.connect(spec.libpq_url, options=options, application_name="paycore-bench")


def _raw_transfer_operation(spec: ClientSpec) -> tuple[Callable[[int], None], Callable[[], None], str]:
    import _ledger_floor

    assert spec.source_id is not None and spec.destination_id is not None
    op, close = _ledger_floor.raw_transfer_operation(
        spec.backend, lambda: _driver_connection(spec), TENANT, spec.tag, spec.index,
        spec.source_id, spec.destination_id, AMOUNT_MINOR, CURRENCY,
    )  # fmt: skip
    probe = _driver_connection(spec)
    if spec.backend == "sqlite":
        durability = _sqlite_durability(lambda sql: probe.execute(sql).fetchone()[0])
    else:
        durability = _postgres_durability(lambda sql: probe.execute(sql).fetchone()[0])
    probe.close()
    return op, close, durability


def _raw_operation(spec: ClientSpec) -> tuple[Callable[[int], None], Callable[[], None], str]:
    if spec.backend == "sqlite":
        connection = _driver_connection(spec)
        durability = _sqlite_durability(lambda sql: connection.execute(sql).fetchone()[0])
        insert = f"INSERT INTO {PROBE_TABLE} (run_tag, client, seq, created_at_us) VALUES (?, ?, ?, ?)"

        def sqlite_op(seq: int) -> None:
            connection.execute("BEGIN IMMEDIATE")
            try:
                connection.execute(insert, (spec.tag, spec.index, seq, time.time_ns() // 1000))
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

        return sqlite_op, connection.close, durability

    pg = _driver_connection(spec)
    durability = _postgres_durability(lambda sql: pg.execute(sql).fetchone()[0])
    pg.commit()
    pg_insert = f"INSERT INTO {PROBE_TABLE} (run_tag, client, seq, created_at_us) VALUES (%s, %s, %s, %s)"

    def postgres_op(seq: int) -> None:
        try:
            pg.execute(pg_insert, (spec.tag, spec.index, seq, time.time_ns() // 1000))
            pg.commit()
        except BaseException:
            pg.rollback()
            raise

    return postgres_op, pg.close, durability


def _database(spec: ClientSpec) -> Any:
    from paycore.config import Settings
    from paycore.db.engine import Database

    return Database(Settings(database_url=spec.database_url, db_pool_size=1))


def _engine_durability(database: Any, backend: str) -> str:
    with database.read() as connection:

        def read(sql: str) -> Any:
            return connection.exec_driver_sql(sql).scalar()

        return _sqlite_durability(read) if backend == "sqlite" else _postgres_durability(read)


def _engine_operation(spec: ClientSpec) -> tuple[Callable[[int], None], Callable[[], None], str]:
    from sqlalchemy import text

    database = _database(spec)
    insert = text(f"INSERT INTO {PROBE_TABLE} (run_tag, client, seq, created_at_us) VALUES (:tag, :client, :seq, :now)")

    def op(seq: int) -> None:
        params = {"tag": spec.tag, "client": spec.index, "seq": seq, "now": time.time_ns() // 1000}
        database.transaction(lambda connection: connection.execute(insert, params))

    return op, database.dispose, _engine_durability(database, spec.backend)


def _ledger_operation(spec: ClientSpec) -> tuple[Callable[[int], None], Callable[[], None], str]:
    """What POST /v1/transfers does below HTTP (paycore.http.routers.ledger): the transfer and
    its idempotency record, the response rendered and stored with the key, through
    `paycore.ledger.keyed.create_transfer`; the `-tx` scenarios force its reference path."""
    from paycore.http.errors import dumps, render_refusal
    from paycore.idempotency import service as idempotency
    from paycore.kit.clock import now_us
    from paycore.ledger import keyed
    from paycore.ledger import service as ledger
    from paycore.ledger.schemas import transfer_json

    assert spec.source_id is not None and spec.destination_id is not None
    database = _database(spec)
    one_call = not spec.scenario.endswith("-tx")
    body = {
        "debit_account_id": spec.source_id,
        "credit_account_id": spec.destination_id,
        "amount_minor": AMOUNT_MINOR,
        "currency": CURRENCY,
    }
    transfer_spec = ledger.TransferSpec(
        entries=(
            ledger.EntrySpec(spec.source_id, "debit", AMOUNT_MINOR),
            ledger.EntrySpec(spec.destination_id, "credit", AMOUNT_MINOR),
        ),
        currency=CURRENCY,
    )

    def render(transfer: Any) -> str:
        return dumps(transfer_json(transfer))

    def op(seq: int) -> None:
        key = f"{spec.tag}-{spec.index}-{seq}"
        scope = idempotency.KeyScope(
            tenant_id=TENANT,
            key=key,
            request_fingerprint=idempotency.fingerprint("POST", "/v1/transfers", body),
            now_us=now_us(),
            expires_at_us=None,  # ledger transfers keep their key forever (SPEC §3.1)
        )
        outcome, replayed = keyed.create_transfer(
            database, scope, lambda _now_us: transfer_spec, render, render_refusal, one_call=one_call
        )
        if replayed or outcome.status != 201:
            raise BenchFailure(f"transfer {key}: status {outcome.status}, replayed={replayed}: {outcome.body[:300]}")

    return op, database.dispose, _engine_durability(database, spec.backend)


def client_main(spec: ClientSpec, messages: Any, go: Any, start_at: Any) -> None:
    """One client process: connect, one operation, report ready, wait, run, report."""
    try:
        make = {
            "raw-commit": _raw_operation,
            "engine-commit": _engine_operation,
            "raw-transfer": _raw_transfer_operation,
            "spread": _ledger_operation,
            "hot": _ledger_operation,
            "spread-tx": _ledger_operation,
            "hot-tx": _ledger_operation,
        }[spec.scenario]
        op, close, durability = make(spec)
        op(0)  # connection open, statements and caches warm before the clock starts
        total, seq = 1, 1
        messages.put(("ready", spec.index, None))
        go.wait()
        start = start_at.value
        end = start + spec.duration_s
        in_window = 0
        latencies: list[float] = []
        errors: Counter[str] = Counter()
        errors_in_a_row = 0
        while True:
            began = time.monotonic()
            if began >= end:
                break
            try:
                op(seq)
            except BenchFailure:
                raise
            except Exception as error:  # a transient database error: counted, reported, not hidden
                errors[f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"] += 1
                errors_in_a_row += 1
                if errors_in_a_row >= ERRORS_IN_A_ROW_MAX:
                    break
                continue
            finally:
                seq += 1
            errors_in_a_row = 0
            finished = time.monotonic()
            total += 1
            if start <= finished <= end:
                in_window += 1
                latencies.append(finished - began)
        close()
        result = {
            "in_window": in_window,
            "total": total,
            "latencies_s": latencies,
            "errors": dict(errors),
            "durability": durability,
        }
        messages.put(("result", spec.index, result))
    except BaseException:
        messages.put(("fatal", spec.index, traceback.format_exc()))


# ---------------------------------------------------------------------------- parent side


@dataclass
class Target:
    backend: str
    database_url: str
    libpq_url: str | None = None
    sqlite_path: str | None = None
    postgres_name: str | None = None


def _prepare_target(backend: str, workdir: Path, admin_url: str) -> Target:
    from paycore.config import Settings
    from paycore.db import migrate
    from paycore.db.engine import Database

    if backend == "sqlite":
        path = workdir / "ledger-bench.db"
        target = Target(backend, f"sqlite:///{path}", sqlite_path=str(path))
    else:
        name = common.new_postgres_database(admin_url, "ledger")
        target = Target(
            backend,
            common.postgres_database_url(admin_url, name),
            libpq_url=common.postgres_libpq_url(admin_url, name),
            postgres_name=name,
        )
    database = Database(Settings(database_url=target.database_url, db_pool_size=2))
    try:
        migrate.upgrade(database)
        from sqlalchemy import text

        key = "INTEGER PRIMARY KEY" if backend == "sqlite" else "BIGSERIAL PRIMARY KEY"
        database.transaction(
            lambda connection: connection.execute(
                text(
                    f"CREATE TABLE IF NOT EXISTS {PROBE_TABLE} (id {key}, run_tag TEXT NOT NULL,"
                    " client INTEGER NOT NULL, seq BIGINT NOT NULL, created_at_us BIGINT NOT NULL)"
                )
            )
        )
    finally:
        database.dispose()
    return target


def _prepare_accounts(database: Any, scenario: str, clients: int, tag: str) -> list[tuple[str, str]]:
    """(source, destination) per client; sources are no_overdraft and funded up front."""
    from paycore.kit.clock import now_us
    from paycore.ledger import service as ledger

    def work(connection: Any) -> list[tuple[str, str]]:
        now = now_us()
        funding = ledger.ensure_account(
            connection, TENANT, code="bench.funding", currency=CURRENCY,
            normal_balance="debit", no_overdraft=False, now_us=now,
        )  # fmt: skip

        def new(code: str, no_overdraft: bool) -> str:
            return ledger.create_account(
                connection, TENANT, code=f"{tag}.{code}", currency=CURRENCY, normal_balance="credit",
                no_overdraft=no_overdraft, metadata={}, now_us=now,
            ).id  # fmt: skip

        def funded(code: str) -> str:
            account_id = new(code, True)
            entries = (
                ledger.EntrySpec(funding.id, "debit", FUNDING_MINOR),
                ledger.EntrySpec(account_id, "credit", FUNDING_MINOR),
            )
            ledger.create_transfer(connection, TENANT, ledger.TransferSpec(entries, currency=CURRENCY), now_us=now)
            return account_id

        if scenario.startswith("hot"):
            hot = funded("hot")
            return [(hot, new(f"dst{index}", False)) for index in range(clients)]
        return [(funded(f"src{index}"), new(f"dst{index}", False)) for index in range(clients)]

    return list(database.transaction(work))


def _check_run(database: Any, result: RunResult, pairs: list[tuple[str, str]], totals: list[int]) -> list[str]:
    """The books must show exactly the work the clients counted as committed."""
    from sqlalchemy import text

    from paycore.ledger import service as ledger

    problems: list[str] = []
    expected = sum(totals)
    like = {"pattern": f"{result.tag}-%", "tenant": TENANT}
    with database.read() as connection:

        def count(sql: str, params: dict[str, Any]) -> int:
            return int(connection.execute(text(sql), params).scalar_one())

        if result.scenario in BASELINES:
            rows = count(f"SELECT COUNT(*) FROM {PROBE_TABLE} WHERE run_tag = :tag", {"tag": result.tag})
            if rows != expected:
                problems.append(f"{rows} probe rows committed, clients counted {expected}")
            return problems
        keys = count("SELECT COUNT(*) FROM idempotency_keys WHERE tenant_id = :tenant AND key LIKE :pattern", like)
        transfers = count(
            "SELECT COUNT(*) FROM ledger_transfers WHERE tenant_id = :tenant AND idempotency_key LIKE :pattern", like
        )
        if keys != expected or transfers != expected:
            problems.append(f"{keys} keys and {transfers} transfers committed, clients counted {expected}")
        accounts = {account_id for pair in pairs for account_id in pair}
        posted = {
            account_id: ledger.get_account(connection, TENANT, account_id).balance.posted_minor
            for account_id in accounts
        }
        spent: Counter[str] = Counter()
        for (source, destination), total in zip(pairs, totals, strict=True):
            spent[source] += total * AMOUNT_MINOR
            if posted[destination] != total * AMOUNT_MINOR:
                problems.append(f"destination {destination} holds {posted[destination]}, expected {total}")
        for source, amount in spent.items():
            if posted[source] != FUNDING_MINOR - amount:
                problems.append(f"source {source} holds {posted[source]}, expected {FUNDING_MINOR - amount}")
    return problems


def _run_once(
    target: Target, scenario: str, clients: int, repeat: int, args: argparse.Namespace, database: Any
) -> RunResult:
    tag = f"{secrets.token_hex(3)}{scenario[0]}{clients}r{repeat}"
    result = RunResult(target.backend, scenario, clients, repeat, tag, args.duration_s)
    pairs: list[tuple[str, str]] = []
    if scenario in LEDGER_SCENARIOS:
        pairs = _prepare_accounts(database, scenario, clients, tag)
    context = mp.get_context("spawn")
    messages = context.Queue()
    go = context.Event()
    start_at = context.Value("d", 0.0)
    processes = []
    for index in range(clients):
        source, destination = pairs[index] if pairs else (None, None)
        spec = ClientSpec(
            target.backend, target.database_url, target.libpq_url, target.sqlite_path,
            scenario, index, tag, args.duration_s, source, destination,
        )  # fmt: skip
        process = context.Process(target=client_main, args=(spec, messages, go, start_at), daemon=True)
        process.start()
        processes.append(process)
    outcomes: dict[int, dict[str, Any]] = {}
    fatal: list[str] = []
    try:
        ready = 0
        while ready + len(fatal) < clients:
            kind, index, payload = messages.get(timeout=180)
            if kind == "ready":
                ready += 1
            elif kind == "fatal":
                fatal.append(f"client {index}: {payload}")
        if not fatal:
            start_at.value = time.monotonic() + args.warmup_s
            go.set()
            deadline = time.monotonic() + args.warmup_s + args.duration_s + 180
            while len(outcomes) + len(fatal) < clients:
                kind, index, payload = messages.get(timeout=max(1.0, deadline - time.monotonic()))
                if kind == "result":
                    outcomes[index] = payload
                elif kind == "fatal":
                    fatal.append(f"client {index}: {payload}")
    except queue.Empty:
        fatal.append("timed out waiting for the clients")
    finally:
        go.set()
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()  # our own child, by its handle
                process.join(timeout=10)
    if fatal:
        result.check_problems.extend(fatal)
        return result
    ordered = [outcomes[index] for index in range(clients)]
    result.committed_in_window = sum(o["in_window"] for o in ordered)
    result.committed_total = sum(o["total"] for o in ordered)
    result.per_second = result.committed_in_window / args.duration_s
    latencies = sorted(latency for o in ordered for latency in o["latencies_s"])
    p50, p99 = common.percentile(latencies, 0.50), common.percentile(latencies, 0.99)
    result.latency_p50_ms = None if p50 is None else 1000 * p50
    result.latency_p99_ms = None if p99 is None else 1000 * p99
    errors: Counter[str] = Counter()
    for outcome in ordered:
        errors.update(outcome["errors"])
    result.errors = dict(errors)
    result.durability = sorted({o["durability"] for o in ordered})
    result.check_problems.extend(_check_run(database, result, pairs, [o["total"] for o in ordered]))
    return result


# ---------------------------------------------------------------------------- report


def _summarise(results: list[RunResult]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, int], list[RunResult]] = {}
    for result in results:
        groups.setdefault((result.backend, result.scenario, result.clients), []).append(result)
    medians = {key: common.median([r.per_second for r in runs]) for key, runs in groups.items()}
    rows = []
    for (backend, scenario, clients), runs in groups.items():
        median = medians[(backend, scenario, clients)]
        rows.append(
            {
                "backend": backend,
                "scenario": scenario,
                "clients": clients,
                "runs": [round(r.per_second, 1) for r in runs],
                "median_per_s": median,
                "p50_ms": common.median([r.latency_p50_ms for r in runs if r.latency_p50_ms is not None]),
                "p99_ms": common.median([r.latency_p99_ms for r in runs if r.latency_p99_ms is not None]),
                "vs_raw": common.ratio(median, medians.get((backend, "raw-commit", clients))),
                "vs_engine": common.ratio(median, medians.get((backend, "engine-commit", clients))),
                "vs_floor": common.ratio(median, medians.get((backend, "raw-transfer", clients))),
                "errors": sum(sum(r.errors.values()) for r in runs),
                "checks_ok": all(not r.check_problems for r in runs),
            }
        )
    order = {name: position for position, name in enumerate(SCENARIOS)}
    backends = {"sqlite": 0, "postgres": 1}
    rows.sort(key=lambda row: (backends[row["backend"]], row["clients"], order[row["scenario"]]))
    return rows


def _targets(rows: list[dict[str, Any]]) -> list[list[str]]:
    lines = []
    for row in rows:
        if row["scenario"] == "spread":
            verdict = "-" if row["vs_raw"] is None else ("met" if row["vs_raw"] >= 0.5 else "NOT met")
            lines.append(
                [
                    f"{row['backend']}, {row['clients']} client(s): transfers/s >= 0.5 x raw INSERT+COMMIT",
                    common.fmt_ratio(row["vs_raw"]),
                    verdict,
                ]
            )
        if row["scenario"] == "hot" and row["backend"] == "postgres":
            value = row["median_per_s"]
            verdict = "-" if value is None else ("met" if value >= 1000 else "NOT met")
            lines.append(
                [f"postgres hot account, {row['clients']} client(s): >= 1,000 transfers/s", common.fmt(value), verdict]
            )
    return lines


def render(
    results: list[RunResult], facts: list[tuple[str, str]], verify_lines: list[str], args: argparse.Namespace
) -> str:
    rows = _summarise(results)
    smoke = args.duration_s < 10 or args.repeats < 3
    parts = ["# paycore ledger benchmark", ""]
    if smoke:
        parts += [
            "**SMOKE RUN** (duration < 10 s or fewer than 3 repeats): checks that the benchmark works,"
            " not a measurement. Do not quote these numbers as results.",
            "",
        ]
    parts += [common.facts_table(facts), "", "## Results (medians over repeats)", ""]
    table_rows = [
        [
            row["backend"],
            f"`{row['scenario']}`",
            row["clients"],
            common.fmt(row["median_per_s"]),
            ", ".join(f"{value:,.0f}" for value in row["runs"]),
            common.fmt(row["p50_ms"], 2),
            common.fmt(row["p99_ms"], 2),
            common.fmt_ratio(row["vs_raw"]),
            common.fmt_ratio(row["vs_engine"]),
            common.fmt_ratio(row["vs_floor"]),
            row["errors"],
            "ok" if row["checks_ok"] else "FAILED",
        ]
        for row in rows
    ]
    headers = [
        "backend", "scenario", "clients", "median commits/s", "each repeat", "p50 ms", "p99 ms",
        "vs raw-commit", "vs engine-commit", "vs raw-transfer", "errors", "books",
    ]  # fmt: skip
    parts += [common.markdown_table(headers, table_rows), ""]
    parts += ["Scenarios:", ""] + [f"- `{name}`: {text}" for name, text in DESCRIPTIONS.items()] + [""]
    parts += [
        "commits/s counts operations completed inside the measured window, all clients together"
        " (one transfer per commit for `spread`/`hot`). p50/p99: latency of one operation (BEGIN to"
        " COMMIT returned) over all clients' operations in the window, median over repeats. Ratios are"
        " ratios of medians, same backend and client count.",
        "",
    ]
    target_rows = _targets(rows)
    if target_rows:
        parts += ["## Targets (issue 2)", "", common.markdown_table(["target", "measured", "verdict"], target_rows), ""]
    parts += ["## Correctness", ""] + [f"- {line}" for line in verify_lines]
    problems = [(r, p) for r in results for p in r.check_problems]
    errors = [(r, e, n) for r in results for e, n in r.errors.items()]
    for result, problem in problems:
        parts.append(f"- FAILED {result.backend} {result.scenario} c={result.clients} r={result.repeat}: {problem}")
    for result, error, number in errors:
        parts.append(f"- error x{number} in {result.backend} {result.scenario} c={result.clients}: {error}")
    durability = sorted({(r.backend, d) for r in results for d in r.durability})
    parts += ["", "Durability settings read back by the clients:", ""]
    parts += [f"- {backend}: {text}" for backend, text in durability]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------- main


def _int_list(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def _scenario_list(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [value for value in values if value not in SCENARIOS]
    if unknown or not values:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(SCENARIOS)}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--clients", type=_int_list, default=[1, 4], help="client counts, e.g. 1,4 (default)")
    parser.add_argument("--duration-s", type=float, default=10.0, help="measured seconds per run (default 10)")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="unmeasured seconds before each run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration; the median is reported")
    parser.add_argument("--scenarios", type=_scenario_list, default=list(SCENARIOS), help=",".join(SCENARIOS))
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL, help="admin URL (libpq form)")
    parser.add_argument("--workdir", type=Path, default=None, help="where SQLite files go (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file and PostgreSQL database")
    parser.add_argument("--out", type=Path, default=common.RESULTS_DIR, help="where the .md/.json results go")
    args = parser.parse_args(argv)
    if args.duration_s <= 0 or args.warmup_s < 0 or args.repeats < 1:
        parser.error("--duration-s must be > 0, --warmup-s >= 0, --repeats >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from paycore.config import Settings
    from paycore.db.engine import Database
    from paycore.ledger.verify import verify

    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    workdir = Path(tempfile.mkdtemp(prefix="paycore-ledger-bench-", dir=args.workdir))
    extra = [
        ("workdir (SQLite files)", f"{workdir} — {common.filesystem_of(workdir)}"),
        ("fsync probe in workdir", common.fsync_probe(workdir)),
    ]
    if "postgres" in backends:
        extra += common.postgres_facts(args.postgres_url)
    facts = common.machine_facts(extra)
    results: list[RunResult] = []
    verify_lines: list[str] = []
    targets: list[Target] = []
    try:
        for backend in backends:
            targets.append(_prepare_target(backend, workdir, args.postgres_url))
        databases = {t.backend: Database(Settings(database_url=t.database_url, db_pool_size=2)) for t in targets}
        for repeat in range(1, args.repeats + 1):
            for target in targets:
                for scenario in args.scenarios:
                    if scenario in POSTGRES_ONLY and target.backend != "postgres":
                        continue  # SQLite has only the reference path
                    for clients in args.clients:
                        result = _run_once(target, scenario, clients, repeat, args, databases[target.backend])
                        results.append(result)
                        status = "ok" if not result.check_problems else "FAILED: " + result.check_problems[0][:300]
                        print(
                            f"[{repeat}/{args.repeats}] {target.backend:8} {scenario:13} clients={clients}:"
                            f" {result.per_second:9,.1f}/s  errors={sum(result.errors.values())}  {status}",
                            file=sys.stderr,
                            flush=True,
                        )
        for target in targets:
            with databases[target.backend].read() as connection:
                report = verify(connection)
            verdict = "ok" if report.ok else "FAILED: " + "; ".join(report.problems[:5])
            verify_lines.append(
                f"{target.backend}: `paycore.ledger.verify` over {report.accounts} accounts,"
                f" {report.transfers} transfers, {report.entries} entries: {verdict}"
            )
            if not report.ok:
                results[-1].check_problems.append(f"ledger verify failed on {target.backend}")
            databases[target.backend].dispose()
    finally:
        for target in targets:
            if target.postgres_name and not args.keep:
                common.drop_postgres_database(args.postgres_url, target.postgres_name)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    facts.append(("load average at end (1/5/15 min)", common.load_average()))
    text = render(results, facts, verify_lines, args)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (args.out / f"ledger-{stamp}.md").write_text(text)
    (args.out / f"ledger-{stamp}.json").write_text(
        json.dumps({"facts": facts, "results": [asdict(r) for r in results]}, indent=2)
    )
    print(f"(written to {args.out}/ledger-{stamp}.md and .json)", file=sys.stderr)
    failed = any(r.check_problems for r in results) or any("FAILED" in line for line in verify_lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
