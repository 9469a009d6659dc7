#!/usr/bin/env python3
"""What one server round trip per transfer could reach on PostgreSQL, and what in paycore's
schema that round trip pays for (issue 2, "what would lift it").

Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/pg_schema_cost.py --duration-s 3 --repeats 3

Not paycore's code path: an experiment on its schema. For each variant a fresh database
`bench_schema_*` is migrated with `paycore db upgrade`, then some constraints are dropped
(cumulatively, in the order of VARIANTS), and a PL/pgSQL function writes the rows of one
`spread` transfer (key claim, transfer, two balance UPDATEs, two entries, recorded response)
in ONE call, in autocommit: one round trip and one commit per transfer. One client; the
variants and a bare INSERT in autocommit (one round trip and one commit, like the function;
`ledger_bench.py`'s `raw-commit` also pays psycopg's BEGIN round trip, so this limit is the
higher, stricter one) are interleaved in every repeat. Databases are dropped at the end.

The last variant also records the key with its response in one INSERT instead of a claim
and an UPDATE. The first is the schema as it was before migration 0008 (`paycore db upgrade
0007`), so the gain of 0008 is measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common

# The schema before migration 0008, whose keys let the planner check each entry's transfer
# through the (tenant_id, reverses_id) index (docs/benchmarks.md, "The foreign keys' plans").
BEFORE_0008 = "paycore's schema at 0007"
VARIANTS: list[tuple[str, list[str]]] = [
    ("paycore's schema", []),
    (
        "- the entries' FK to their transfer",
        ["ALTER TABLE ledger_entries DROP CONSTRAINT fk_ledger_entries_tenant_id_transfer_id_ledger_transfers"],
    ),
    (
        "- the entries' FK to their account",
        ["ALTER TABLE ledger_entries DROP CONSTRAINT fk_ledger_entries_tenant_id_account_id_ledger_accounts"],
    ),
    ("- the deferred balance trigger", ["DROP TRIGGER ledger_entries_balanced ON ledger_entries"]),
    (
        "- the transfers' unique and expiry indexes",
        [
            "DROP INDEX uq_ledger_transfers_tenant_id_pending_id",
            "DROP INDEX uq_ledger_transfers_tenant_id_reverses_id",
            "DROP INDEX uq_ledger_transfers_tenant_id_idempotency_key",
            "DROP INDEX ix_ledger_transfers_pending_expiry",
        ],
    ),
    (
        "- the entries' secondary indexes",
        [
            "DROP INDEX ix_ledger_entries_transfer",
            "ALTER TABLE ledger_entries DROP CONSTRAINT uq_ledger_entries_tenant_id_account_id_account_sequence",
        ],
    ),
    ("key and response in one INSERT", []),
]

LIMIT = "bare INSERT + COMMIT (the limit)"
_PROBE = "INSERT INTO bench_commit_probe (note) VALUES ('x')"
_CLAIM = (
    "INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,"
    " expires_at_us) VALUES ('t', p_key, 'fp', NULL, NULL, p_now, NULL) ON CONFLICT DO NOTHING;"
)
_RECORD = (
    "UPDATE idempotency_keys SET response_status = 201, response_body = '{}' WHERE tenant_id = 't' AND key = p_key;"
)
_KEY_WITH_RESPONSE = (
    "INSERT INTO idempotency_keys (tenant_id, key, fingerprint, response_status, response_body, created_at_us,"
    " expires_at_us) VALUES ('t', p_key, 'fp', 201, '{}', p_now, NULL);"
)


def _function(one_insert: bool) -> str:
    return f"""
CREATE FUNCTION bench_transfer(p_key text, p_id text, p_now bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE s bigint; d bigint;
BEGIN
    {"" if one_insert else _CLAIM}
    INSERT INTO ledger_transfers (tenant_id, id, kind, idempotency_key, reference_type, metadata, created_at_us)
        VALUES ('t', p_id, 'transfer', p_key, 'adjustment', '{{}}', p_now);
    UPDATE ledger_accounts SET credits_posted_minor = credits_posted_minor + 1, entries_count = entries_count + 1
        WHERE tenant_id = 't' AND id = 'dst' RETURNING entries_count INTO d;
    UPDATE ledger_accounts SET debits_posted_minor = debits_posted_minor + 1, entries_count = entries_count + 1
        WHERE tenant_id = 't' AND id = 'src' AND credits_posted_minor - debits_posted_minor >= 1
        RETURNING entries_count INTO s;
    IF s IS NULL THEN RAISE EXCEPTION 'insufficient funds'; END IF;
    INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,
        account_sequence, created_at_us)
        VALUES ('t', p_id || 'd', p_id, 'src', 'debit', 1, 'USD', s, p_now),
               ('t', p_id || 'c', p_id, 'dst', 'credit', 1, 'USD', d, p_now);
    {_KEY_WITH_RESPONSE if one_insert else _RECORD}
    RETURN s;
END $$"""


_ACCOUNTS = (
    "INSERT INTO ledger_accounts (tenant_id, id, code, currency, normal_balance, no_overdraft, metadata,"
    " debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor, entries_count,"
    " created_at_us) VALUES ('t', 'src', 'src', 'USD', 'credit', true, '{}', 0, 1000000000000, 0, 0, 0, 0),"
    " ('t', 'dst', 'dst', 'USD', 'credit', false, '{}', 0, 0, 0, 0, 0, 0)"
)


def _prepare(admin_url: str, drops: list[str], one_insert: bool, revision: str = "head") -> tuple[str, Any]:
    import psycopg

    name = common.new_postgres_database(admin_url, "schema")
    env = dict(os.environ, PAYCORE_DATABASE_URL=common.postgres_database_url(admin_url, name))
    paycore = str(Path(sys.executable).parent / "paycore")  # the virtualenv's console script
    subprocess.run([paycore, "db", "upgrade", revision], env=env, check=True, capture_output=True)
    connection = psycopg.connect(common.postgres_libpq_url(admin_url, name), autocommit=True)
    for statement in drops:
        connection.execute(statement)
    connection.execute("CREATE TABLE bench_commit_probe (id bigserial PRIMARY KEY, note text NOT NULL)")
    connection.execute(_ACCOUNTS)  # the ledger's own accounts; the opening balance needs no transfer here
    connection.execute(_function(one_insert))
    return name, connection


def _rate(operation: Callable[[int], None], duration_s: float) -> float:
    count = 0
    start = time.perf_counter()
    deadline = start + duration_s
    while time.perf_counter() < deadline:
        operation(count)
        count += 1
    return count / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres-url", default=common.DEFAULT_POSTGRES_URL)
    parser.add_argument("--duration-s", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.duration_s <= 0 or not 1 <= args.repeats <= 20:
        parser.error("--duration-s must be > 0 and --repeats between 1 and 20")

    print(common.facts_table(common.machine_facts(common.postgres_facts(args.postgres_url))), flush=True)
    created: list[str] = []
    try:
        name, connection = _prepare(args.postgres_url, [], one_insert=False, revision="0007")
        created.append(name)
        targets = [(BEFORE_0008, connection)]
        drops: list[str] = []
        for label, more in VARIANTS:
            drops = drops + more
            name, connection = _prepare(args.postgres_url, drops, one_insert=label.startswith("key and"))
            created.append(name)
            targets.append((label, connection))
        raw_connection = targets[0][1]
        rates: dict[str, list[float]] = {}
        for repeat in range(1, args.repeats + 1):
            rates.setdefault(LIMIT, []).append(_rate(lambda _: raw_connection.execute(_PROBE), args.duration_s))
            for label, connection in targets:
                tag = secrets.token_hex(4)

                def transfer(seq: int, connection: Any = connection, tag: str = tag) -> None:
                    connection.execute("SELECT bench_transfer(%s, %s, %s)", (f"{tag}-{seq}", f"txn_{tag}_{seq}", seq))

                rates.setdefault(label, []).append(_rate(transfer, args.duration_s))
            print(f"repeat {repeat}/{args.repeats} done", file=sys.stderr, flush=True)
        limit = common.median(rates[LIMIT])
        rows = [
            (label, common.fmt(common.median(values)), ", ".join(common.fmt(v) for v in values),
             common.fmt_ratio(common.ratio(common.median(values), limit)))
            for label, values in rates.items()
        ]  # fmt: skip
        print("\nOne client, one call + commit per transfer (variants cumulative, top to bottom):\n")
        print(common.markdown_table(("variant", "median/s", "each repeat", "vs the limit"), rows))
    finally:
        for name in created:
            common.drop_postgres_database(args.postgres_url, name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
