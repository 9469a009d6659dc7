"""A chunk of the report in the database, matched with set-based SQL.

Each chunk's lines are written into a staging table in one go (PostgreSQL: `COPY`; SQLite: one
`executemany`), then matched by a few statements over the whole chunk, joined with the
payments, refunds and payouts they name, instead of line by line in Python:

- `record_seen`: the chunk's lines recorded as seen by the run (`reconciliation_seen`), the
  first line of each object only (`INSERT ... SELECT`, keyed: a key met before is ignored);
- `duplicates`: the lines whose object the run has seen under another line number;
- `unsettled`: the lines seen first that are not *plainly matched*, for `chunks` to judge one by
  one with `matching.judge` as before. A line is plainly matched when the object it names
  exists, has the line's currency and amount (a return: at most the payout's), is in a status
  the line agrees with and proves nothing new (a final status equal to the line's; a pending
  line for an item still waiting), and the fee agrees (none booked yet, or the same). What that
  means is `matching`'s rules, written as SQL (a manual payment's line: its capture, of the
  captured amount); `judge` still decides every other line, and a
  test compares the two on reports larger than a chunk
  (tests/integration/reconciliation/test_set_based.py);
- `record_plain_fees`: the plainly matched charges' and refunds' fees not booked yet, recorded
  once per object (`INSERT ... SELECT`, keyed), their totals by tenant and currency returned to
  be booked on the ledger.

The staging table is a temporary table of the run's own connection (`CREATE TEMP TABLE`): it
is written to no write-ahead log, is seen by no other run, and is emptied at the end of every
chunk's transaction (PostgreSQL `ON COMMIT DELETE ROWS`; SQLite a `DELETE`), or with the
connection if the process dies. Nothing in it outlives a chunk, so it needs no migration.

The three domains' tables are read here by name, through their lifecycle machines (the table
and the stored spellings of their public statuses), and nothing of them is written: every
change of a payment, refund or payout still goes through its service (`chunks`). Dispute lines
(SPEC §6.2) are matched against the `disputes` table, read by name too (and the withdrawal's
ledger transfer, for its moment); the report never moves a dispute.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.db import driver
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.reconciliation.matching import WAITING, Kind
from paycore.reconciliation.report import HEADER, Staged
from paycore.refunds import service as refunds

TABLE: Final = "reconciliation_lines"
# The staging row of a line: its number, then the report's fields (amounts as integers).
COLUMNS: Final = ("line_number", "line_type", "request_id", "processor_id", "tenant_id", *HEADER[4:])
assert HEADER[:4] == ("type", "request_id", "processor_id", "merchant_id"), HEADER
assert COLUMNS[5:7] == ("amount_minor", "fee_minor"), COLUMNS

_CREATE: Final = (
    f"CREATE TEMP TABLE IF NOT EXISTS {TABLE} ("
    "line_number BIGINT PRIMARY KEY, line_type TEXT NOT NULL, request_id TEXT NOT NULL, "
    "processor_id TEXT NOT NULL, tenant_id TEXT NOT NULL, amount_minor BIGINT NOT NULL, "
    "fee_minor BIGINT NOT NULL, currency TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL, "
    "batch_id TEXT NOT NULL, code TEXT NOT NULL)"
)
_LINE_COLUMNS: Final = ", ".join(f"l.{name}" for name in COLUMNS)
# A line as the run records it seen (`reconciliation_seen`, whose line type is at most 16
# characters): a dispute line (SPEC §6.2) under a short type of its own and the processor's
# dispute id, the object it names (its request id is the disputed charge's); any other line as is.
SEEN_TYPES: Final = {
    "dispute_withdrawal": "dp_withdrawal",
    "dispute_fee": "dp_fee",
    "dispute_reinstatement": "dp_reinstatement",
}
assert all(len(short) <= 16 for short in SEEN_TYPES.values()), SEEN_TYPES
_DISPUTE_TYPES: Final = ", ".join(f"'{line_type}'" for line_type in SEEN_TYPES)
_SEEN_TYPE: Final = (
    "(CASE l.line_type "
    + " ".join(f"WHEN '{line_type}' THEN '{short}'" for line_type, short in SEEN_TYPES.items())
    + " ELSE l.line_type END)"
)
_SEEN_ID: Final = f"(CASE WHEN l.line_type IN ({_DISPUTE_TYPES}) THEN l.processor_id ELSE l.request_id END)"
# The seen row of a line that was its object's first in the run.
_FIRST: Final = (
    f"JOIN reconciliation_seen s ON s.run_id = ? AND s.line_type = {_SEEN_TYPE} AND s.tenant_id = l.tenant_id "
    f"AND s.request_id = {_SEEN_ID}"
)
# The tenant a plain match's subqueries are joined on: the seen row's, equal to the line's by
# `_FIRST`. On Citus the staging table is the coordinator's own (a temporary table): joined with
# it, a subquery's distributed tables are refused ("complex joins are only supported when all
# distributed tables are co-located and joined on their distribution columns"); joined with
# `reconciliation_seen`, distributed by tenant too, Citus sends the whole statement to the shards.
_TENANT: Final = "s.tenant_id"


def create(connection: Connection) -> None:
    """The staging table, empty, in this connection (created on its first chunk)."""
    suffix = " ON COMMIT DELETE ROWS" if _postgres(connection) else ""
    connection.exec_driver_sql(_CREATE + suffix)


def clear(connection: Connection) -> None:
    """Empty it before the chunk's transaction ends (PostgreSQL does so itself at commit)."""
    if not _postgres(connection):
        connection.exec_driver_sql(f"DELETE FROM {TABLE}")


def write(connection: Connection, rows: Sequence[Staged]) -> None:
    """The chunk's lines into the staging table, in one statement (COPY) or one executemany."""
    if not rows:
        return
    if not _postgres(connection):
        marks = ", ".join("?" for _ in COLUMNS)
        connection.exec_driver_sql(f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({marks})", list(rows))
        return
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        with cursor.copy(f"COPY {TABLE} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    except connection.dialect.loaded_dbapi.Error as error:
        # As SQLAlchemy raises a driver's error (so that Database.transaction retries a deadlock).
        raise DBAPIError.instance("COPY", None, error, connection.dialect.loaded_dbapi.Error) from error
    finally:
        cursor.close()


def take_tenants(connection: Connection, tenant_ids: Iterable[str]) -> list[Staged]:
    """The staged lines of these merchants (no tenants of paycore), removed from the chunk."""
    wanted = sorted(set(tenant_ids))
    if not wanted:
        return []
    marks = ", ".join("?" for _ in wanted)
    found = _fetch(connection, f"SELECT {_LINE_COLUMNS} FROM {TABLE} l WHERE l.tenant_id IN ({marks})", wanted)
    _execute(connection, f"DELETE FROM {TABLE} WHERE tenant_id IN ({marks})", wanted)
    return found


def record_seen(connection: Connection, run_id: str) -> None:
    """Record the staged lines as seen by the run: each object's first line of the chunk,
    unless the run saw it in an earlier chunk (then every line of it here is a duplicate)."""
    conflict = "ON CONFLICT DO NOTHING"
    sql = (
        "INSERT INTO reconciliation_seen (run_id, line_type, tenant_id, request_id, line_number) "
        f"SELECT ?, {_SEEN_TYPE}, l.tenant_id, {_SEEN_ID}, MIN(l.line_number) FROM {TABLE} l WHERE 1 = 1 "
        f"GROUP BY {_SEEN_TYPE}, l.tenant_id, {_SEEN_ID} {conflict}"
    )
    _execute(connection, sql, [run_id])


def duplicates(connection: Connection, run_id: str) -> list[Staged]:
    """The staged lines whose object the run saw first on another line, in line order."""
    sql = f"SELECT {_LINE_COLUMNS} FROM {TABLE} l {_FIRST} WHERE s.line_number <> l.line_number ORDER BY l.line_number"
    return _fetch(connection, sql, [run_id])


def unsettled(connection: Connection, run_id: str) -> list[Staged]:
    """The staged lines seen first that are not plainly matched (see the module), in line
    order: the ones `matching.judge` decides, one by one."""
    plain = " OR ".join(f"({_plain(line_type, new_fee=False)})" for line_type in _PLAIN_TYPES)
    sql = (
        f"SELECT {_LINE_COLUMNS} FROM {TABLE} l {_FIRST} "
        f"WHERE s.line_number = l.line_number AND NOT ({plain}) ORDER BY l.line_number"
    )
    return _fetch(connection, sql, [run_id])


def record_plain_fees(connection: Connection, run_id: str, now_us: int) -> list[tuple[str, str, int, int]]:
    """Record the fee of each plainly matched charge and refund whose object has none recorded
    yet (keyed per object: never twice); (tenant, currency, total fee, objects) of those
    recorded now, to be booked on the ledger."""
    selects = [
        f"SELECT l.tenant_id, '{kind}', l.request_id, l.currency, l.fee_minor, ?, ? FROM {TABLE} l {_FIRST} "
        f"WHERE s.line_number = l.line_number AND l.fee_minor > 0 AND {_plain(line_type, new_fee=True)}"
        for line_type, kind in (("charge", "payment"), ("refund", "refund"))
    ]
    insert = (
        "INSERT INTO reconciliation_fees (tenant_id, object_type, object_id, currency, fee_minor, run_id, "
        f"created_at_us) SELECT * FROM ({' UNION ALL '.join(selects)}) AS plain WHERE 1 = 1 "
        "ON CONFLICT DO NOTHING RETURNING tenant_id, currency, fee_minor"
    )
    params = [run_id, now_us, run_id] * 2
    if _postgres(connection):
        sql = (
            f"WITH recorded AS ({insert}) SELECT tenant_id, currency, SUM(fee_minor), COUNT(*) FROM recorded "
            "GROUP BY tenant_id, currency"
        )
        return [
            (tenant, currency, int(total), int(count))
            for tenant, currency, total, count in _fetch(connection, sql, params)
        ]
    totals: dict[tuple[str, str], list[int]] = {}
    for tenant, currency, fee_minor in _fetch(connection, insert, params):
        total = totals.setdefault((tenant, currency), [0, 0])
        total[0] += int(fee_minor)
        total[1] += 1
    return [(tenant, currency, total, count) for (tenant, currency), (total, count) in totals.items()]


# --- the money paycore believes moved that no line named (closing's missing_at_processor) --

# Per kind: the line that names it, when its money moved (alias `o`), the statuses (public) whose
# money moved. A manual payment's line is its capture, dated by the capture (SPEC §6.1): it moved
# when it became `succeeded` (its last change: `updated_at_us`), not when it was authorized. A
# dispute's (SPEC §6.2) is its chargeback's withdrawal, dated by the ledger transfer that withdrew
# it (an inquiry withdraws nothing until it becomes a chargeback); `_MOVED_DISPUTE` says so.
_MOVED: Final = {
    "payment": (
        "charge",
        "(CASE WHEN o.capture_method = 'manual' THEN o.updated_at_us ELSE o.created_at_us END)",
        ("succeeded",),
    ),
    "refund": ("refund", "o.created_at_us", ("succeeded",)),
    "payout": ("payout", "o.settled_at_us", ("settled", "returned")),
}
_MOVED_DISPUTE: Final = (
    "disputes",
    SEEN_TYPES["dispute_withdrawal"],
    "(SELECT t.created_at_us FROM ledger_transfers t WHERE t.tenant_id = o.tenant_id "
    "AND t.id = o.withdrawal_transfer_id)",
    "o.withdrawn_minor > 0",
    "o.processor_dispute_id",
)
Unnamed = tuple[str, str, str, int, str]  # (tenant, id, stored status, amount_minor, currency)


def _moved(kind: str) -> tuple[str, str, str, str, str]:
    """(table, seen line type, moment, condition of money moved, id the line names) of `kind`."""
    if kind == "dispute":
        return _MOVED_DISPUTE
    line_type, moment, statuses = _MOVED[kind]
    machine: Any = {"payment": payments.MACHINE, "refund": refunds.MACHINE, "payout": payouts.MACHINE}[kind]
    return machine.table.name, line_type, moment, f"o.status IN ({_stored(machine, statuses)})", "o.id"


def unnamed(
    connection: Connection,
    kind: str,
    *,
    window_us: tuple[int, int],
    run_ids: Sequence[str],
    after: tuple[str, str] | None,
    limit: int,
) -> list[Unnamed]:
    """A page, in key order after `after`, of the objects of `kind` whose money moved in the
    window (`payments.MACHINE.moved_between` and its kin say which) that no line of these runs named:
    one anti-join, so that only the few missing objects come back to Python."""
    table, line_type, moment, moved, reference = _moved(kind)
    runs = ", ".join("?" for _ in run_ids)
    where_after, after_params = (
        ("", [])
        if after is None
        else ("AND (o.tenant_id > ? OR (o.tenant_id = ? AND o.id > ?)) ", [after[0], after[0], after[1]])
    )
    sql = (
        f"SELECT o.tenant_id, o.id, o.status, o.amount_minor, o.currency FROM {table} o "
        f"WHERE {moved} AND {moment} >= ? AND {moment} < ? {where_after}"
        f"AND NOT EXISTS (SELECT 1 FROM reconciliation_seen s WHERE s.run_id IN ({runs}) AND s.line_type = ? "
        f"AND s.tenant_id = o.tenant_id AND s.request_id = {reference}) ORDER BY o.tenant_id, o.id LIMIT ?"
    )
    params = [window_us[0], window_us[1], *after_params, *run_ids, line_type, limit]
    return [
        (tenant, item_id, status, int(amount), currency)
        for tenant, item_id, status, amount, currency in _fetch(connection, sql, params)
    ]


# --- plainly matched, by line type: matching's rules as SQL -------------------------------

_PLAIN_TYPES: Final = ("charge", "refund", "payout", "payout_return", *SEEN_TYPES)


# A charge line's amount: a manual payment's is what was captured (SPEC §6.1: the report lists
# captures, of the captured amount); its only plain line is the capture of a succeeded payment.
# `matching.judge` (with `lookups.known_of`) decides every other line of a manual payment.
_CHARGE_AMOUNT: Final = (
    "((o.capture_method = 'automatic' AND o.amount_minor = l.amount_minor) OR (o.capture_method = 'manual' "
    "AND l.status = 'succeeded' "
    "AND COALESCE(o.amount_captured_minor, o.capture_requested_minor, o.amount_minor) = l.amount_minor))"
)


def _plain(line_type: str, *, new_fee: bool) -> str:
    """The condition under which a staged line of `line_type` (alias `l`, its seen row `s`) is plainly matched;
    `new_fee`: and its object has no fee recorded yet (the fee is to be booked)."""
    if line_type in ("charge", "refund"):
        machine = payments.MACHINE if line_type == "charge" else refunds.MACHINE
        kind: Kind = "payment" if line_type == "charge" else "refund"
        waiting = _stored(machine, WAITING[kind])
        succeeded, failed = _stored(machine, ["succeeded"]), _stored(machine, ["failed"])
        fee = "f.fee_minor IS NULL" if new_fee else "(f.fee_minor IS NULL OR f.fee_minor = l.fee_minor)"
        amount = _CHARGE_AMOUNT if line_type == "charge" else "o.amount_minor = l.amount_minor"
        return (
            f"l.line_type = '{line_type}' AND EXISTS (SELECT 1 FROM {machine.table.name} o "
            f"LEFT JOIN reconciliation_fees f ON f.tenant_id = o.tenant_id AND f.object_type = '{kind}' "
            "AND f.object_id = o.id "
            f"WHERE o.tenant_id = {_TENANT} AND o.id = l.request_id AND o.currency = l.currency "
            f"AND {amount} "
            f"AND ((l.status = 'pending' AND o.status IN ({waiting})) "
            f"OR (l.status = 'succeeded' AND o.status IN ({succeeded})) "
            f"OR (l.status = 'failed' AND o.status IN ({failed}))) AND {fee})"
        )
    if line_type in SEEN_TYPES:
        assert not new_fee, "the processor books no fee on a dispute line"
        return _plain_dispute(line_type)
    assert not new_fee, "a payout's fee is the bank's, booked by its settlement"
    settlement = line_type == "payout"
    statuses = _stored(payouts.MACHINE, ["settled", "returned"] if settlement else ["returned"])
    amount = "o.amount_minor = l.amount_minor" if settlement else "l.amount_minor <= o.amount_minor"
    bank_fee = (
        "COALESCE((SELECT SUM(a.amount_minor) FROM payout_adjustments a WHERE a.tenant_id = o.tenant_id "
        f"AND a.payout_id = o.id AND a.kind = '{'fee' if settlement else 'return_fee'}' AND a.source = 'bank'), 0)"
    )
    return (
        f"l.line_type = '{line_type}' AND EXISTS (SELECT 1 FROM {payouts.MACHINE.table.name} o "
        f"WHERE o.tenant_id = {_TENANT} AND o.id = l.request_id AND o.currency = l.currency "
        f"AND {amount} AND o.status IN ({statuses}) AND {bank_fee} = l.fee_minor)"
    )


# What a dispute line is compared with (`lookups._dispute`): the disputed amount or the fee paycore
# withdrew (its chargeback's transfer of `withdrawn_minor`, amount plus fee), what it reinstated.
_DISPUTE_AMOUNT: Final = {
    "dispute_withdrawal": "d.withdrawn_minor > 0 AND d.amount_minor = l.amount_minor",
    "dispute_fee": "d.withdrawn_minor > 0 AND d.withdrawn_minor - d.amount_minor = l.amount_minor",
    "dispute_reinstatement": "d.reinstated_minor > 0 AND d.reinstated_minor = l.amount_minor",
}


def _plain_dispute(line_type: str) -> str:
    """A dispute line is plainly matched when paycore holds the dispute it names (by the
    processor's dispute id), in its currency, and moved the same money (`matching`'s rules)."""
    return (
        f"l.line_type = '{line_type}' AND l.fee_minor = 0 AND EXISTS (SELECT 1 FROM disputes d "
        f"WHERE d.tenant_id = {_TENANT} AND d.processor_dispute_id = l.processor_id AND d.currency = l.currency "
        f"AND {_DISPUTE_AMOUNT[line_type]})"
    )


def _stored(machine: Any, public_names: Iterable[str]) -> str:
    """The stored spellings of these public statuses, as SQL literals (known words, no input)."""
    stored = machine.stored(list(public_names))
    assert stored and all(value.replace("_", "").isalpha() for value in stored), stored
    return ", ".join(f"'{value}'" for value in stored)


def _postgres(connection: Connection) -> bool:
    return connection.dialect.name == "postgresql"


def _fetch(connection: Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    return driver.fetch(connection, driver.statement(sql), params)


def _execute(connection: Connection, sql: str, params: Sequence[Any]) -> int:
    return driver.execute(connection, driver.statement(sql), params)
