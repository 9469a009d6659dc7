"""The SQL of a batch of transfers (`paycore.ledger.batch`, `paycore.ledger.batch_keyed`): the one
call that writes a batch on PostgreSQL (with its key's claim and answer, or inside the key's
transaction), and the multi-row insert of transfers SQLite writes it with. No rules here."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection

from paycore.db import driver, loop_calls
from paycore.db.engine import Database
from paycore.ledger.models import transfers

# PostgreSQL only (migration 0019): the batch's accounts locked, checked and updated, its
# transfers and entries inserted, in one statement inside the caller's transaction.
_CREATE_BATCH_CALL = driver.binary_arrays(
    driver.statement(
        "SELECT first_sequences, refused_transfer, refused_account, refusal FROM paycore_create_batch(?, ?, ?,"
        " ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[],"
        " ?::integer[], ?::integer[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::integer[], ?::text[],"
        " ?::text[], ?::integer[], ?::text[], ?::bigint[])"
    )
)


def create_batch_call(connection: Connection, params: Sequence[Any]) -> tuple[list[int] | None, int, str, str]:
    """(each move's first sequence number, -1, '', '') once written; or (None, the
    refused transfer's 0-based position, its account, what was refused), having written nothing."""
    [(sequences, refused_transfer, refused_account, refusal)] = driver.fetch(connection, _CREATE_BATCH_CALL, params)
    if refusal is not None:
        return None, int(refused_transfer), str(refused_account), str(refusal)
    return [int(value) for value in sequences], -1, "", ""


# PostgreSQL only (migration 0050): the same call with the key claimed first and the answer
# stored last, in autocommit: the whole keyed batch in one round trip.
_CREATE_KEYED_BATCH_CALL = driver.binary_arrays(
    driver.statement(
        "SELECT first_sequences, refused_transfer, refused_account, refusal FROM paycore_create_batch(?, ?, ?, ?,"
        " ?, ?, ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[],"
        " ?::integer[], ?::integer[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::integer[], ?::text[],"
        " ?::text[], ?::integer[], ?::text[], ?::bigint[], ?::integer, ?::text[])"
    )
)


def create_keyed_batch_call(connection: Connection, params: Sequence[Any]) -> list[int] | None:
    """Each move's first sequence number, the batch and its key's answer committed; None,
    having written nothing, if the key exists or the batch is refused (the caller's reference
    path then replays, or refuses and records the refusal): `refusal` is then `key_exists` or
    the batch's own refusal."""
    return _keyed_batch_sequences(driver.fetch(connection, _CREATE_KEYED_BATCH_CALL, params))


async def create_keyed_batch_call_on_loop(database: Database, params: Sequence[Any]) -> list[int] | None:
    """`create_keyed_batch_call` from the event loop, on a connection of the loop's
    (`db/loop_calls.py`, no worker thread): the same call and answer, its errors the same
    `DBAPIError`s; a connection lost during it is `CommitOutcomeUnknown`, as on a thread."""
    return _keyed_batch_sequences(await loop_calls.fetch(database, _CREATE_KEYED_BATCH_CALL, params, commits=True))


def _keyed_batch_sequences(rows: Sequence[tuple[Any, ...]]) -> list[int] | None:
    [(sequences, _, _, refusal)] = rows
    if refusal is not None:
        return None
    return [int(value) for value in sequences]


_TRANSFER_COLUMNS = tuple(column.name for column in transfers.columns)
# Transfers per INSERT statement: bounds its size (6,000 values; SQLite allows 32,766).
TRANSFERS_PER_STATEMENT_MAX = 500


@lru_cache(maxsize=8)
def _insert_transfers_statement(count: int) -> driver.Statement:
    row = f"({', '.join('?' * len(_TRANSFER_COLUMNS))})"
    return driver.statement(
        f"INSERT INTO ledger_transfers ({', '.join(_TRANSFER_COLUMNS)}) VALUES {', '.join([row] * count)}"
    )


def insert_transfers(connection: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert transfers, a multi-row statement per TRANSFERS_PER_STATEMENT_MAX of them."""
    for start in range(0, len(rows), TRANSFERS_PER_STATEMENT_MAX):
        chunk = rows[start : start + TRANSFERS_PER_STATEMENT_MAX]
        params = [row[name] for row in chunk for name in _TRANSFER_COLUMNS]
        driver.execute(connection, _insert_transfers_statement(len(chunk)), params)
