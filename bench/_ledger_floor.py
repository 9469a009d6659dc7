"""`raw-transfer` for bench/ledger_bench.py: one paycore transfer written by the bare driver.

The same rows as paycore's money path, in the same tables and order, with the same durability
settings, but no paycore and no SQLAlchemy: claim the idempotency key, read the two accounts,
insert the transfer, update each account's totals (bounds in the WHERE clause, RETURNING the
totals and entry count), insert both entries numbered from those counts, record the response,
commit. The overdraft check is done on the totals the UPDATE returned, as paycore does.

This is the floor of a transfer on this schema: how fast the database itself can take the
rows of one transfer per commit. paycore's `spread` can approach it, never pass it; its
distance to `raw-commit` (one tiny row per commit) is the database's own work.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from paycore.db import driver
from paycore.kit import ids

_CLAIM = driver.statement(
    'INSERT INTO idempotency_keys (tenant_id, "key", fingerprint, response_status, response_body,'
    " created_at_us, expires_at_us) VALUES (?, ?, ?, NULL, NULL, ?, NULL)"
    ' ON CONFLICT (tenant_id, "key") DO NOTHING RETURNING "key"'
)
_ACCOUNTS = driver.statement(
    "SELECT id, currency, normal_balance, no_overdraft FROM ledger_accounts WHERE tenant_id = ? AND id IN (?, ?)"
)
_TRANSFER = driver.statement(
    "INSERT INTO ledger_transfers (tenant_id, id, kind, pending_id, reverses_id, batch_id, idempotency_key,"
    " reference_type, reference_id, metadata, expires_at_us, created_at_us)"
    " VALUES (?, ?, 'transfer', NULL, NULL, NULL, ?, 'adjustment', NULL, '{}', NULL, ?)"
)
_TOTALS = driver.statement(
    "UPDATE ledger_accounts SET debits_posted_minor = debits_posted_minor + ?,"
    " credits_posted_minor = credits_posted_minor + ?, entries_count = entries_count + 1"
    " WHERE tenant_id = ? AND id = ? AND debits_posted_minor <= ? AND credits_posted_minor <= ?"
    " RETURNING debits_posted_minor, credits_posted_minor, debits_pending_minor, credits_pending_minor,"
    " entries_count"
)
_ENTRIES = driver.statement(
    "INSERT INTO ledger_entries (tenant_id, id, transfer_id, account_id, direction, amount_minor, currency,"
    " account_sequence, created_at_us) VALUES (?, ?, ?, ?, 'debit', ?, ?, ?, ?), (?, ?, ?, ?, 'credit', ?, ?, ?, ?)"
)
_RECORD = driver.statement(
    'UPDATE idempotency_keys SET response_status = 201, response_body = ? WHERE tenant_id = ? AND "key" = ?'
)
_TOTAL_MAX = 2**63 - 1


class Refused(Exception):
    pass


def raw_transfer_operation(
    backend: str, connect: Callable[[], Any], tenant: str, tag: str, index: int, source: str, destination: str,
    amount_minor: int, currency: str,
) -> tuple[Callable[[int], None], Callable[[], None]]:  # fmt: skip
    """(operation, close): `connect()` gives a driver connection with paycore's settings."""
    connection = connect()
    sqlite = backend == "sqlite"

    def sql(statement: driver.Statement) -> str:
        return statement.sqlite if sqlite else statement.postgresql

    def op(seq: int) -> None:
        key = f"{tag}-{index}-{seq}"
        now_us = time.time_ns() // 1000
        transfer_id = ids.new_id("txn")
        cursor = connection.cursor()
        if sqlite:
            cursor.execute("BEGIN IMMEDIATE")
        try:
            cursor.execute(sql(_CLAIM), (tenant, key, "0" * 64, now_us))
            if not cursor.fetchall():
                raise Refused(f"key {key} exists")
            cursor.execute(sql(_ACCOUNTS), (tenant, source, destination))
            accounts = {row[0]: row for row in cursor.fetchall()}
            if len(accounts) != 2 or {row[1] for row in accounts.values()} != {currency}:
                raise Refused("accounts missing or in another currency")
            cursor.execute(sql(_TRANSFER), (tenant, transfer_id, key, now_us))
            sequences = {}
            for account_id, debit in sorted(((source, amount_minor), (destination, 0))):
                credit = amount_minor - debit
                cursor.execute(
                    sql(_TOTALS),
                    (debit, credit, tenant, account_id, _TOTAL_MAX - debit, _TOTAL_MAX - credit),
                )
                debits, credits, debits_pending, credits_pending, count = cursor.fetchone()
                _, _, normal, no_overdraft = accounts[account_id]
                if normal == "credit":
                    available = credits - debits - debits_pending
                else:
                    available = debits - credits - credits_pending
                if no_overdraft and available < 0:
                    raise Refused("insufficient funds")
                sequences[account_id] = count
            cursor.execute(
                sql(_ENTRIES),
                (
                    tenant, ids.new_id("ent"), transfer_id, source, amount_minor, currency, sequences[source], now_us,
                    tenant, ids.new_id("ent"), transfer_id, destination, amount_minor, currency,
                    sequences[destination], now_us,
                ),
            )  # fmt: skip
            body = json.dumps({"id": transfer_id, "object": "transfer", "amount_minor": amount_minor})
            cursor.execute(sql(_RECORD), (body, tenant, key))
            if sqlite:
                cursor.execute("COMMIT")
            else:
                connection.commit()
        except BaseException:
            if sqlite:
                if connection.in_transaction:
                    cursor.execute("ROLLBACK")
            else:
                connection.rollback()
            raise
        finally:
            cursor.close()

    return op, connection.close
