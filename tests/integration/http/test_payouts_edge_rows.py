"""The rows the thin edges of `POST /v1/payouts` and its cancel write from the event loop
(`payouts/create.py`'s `create_on_loop`, `payouts/cancel.py`'s `cancel_on_loop`, ADR 0026
decision 4) are the FastAPI routes' (on a worker thread): the same requests, in the same order,
sent to an app with the edges and to one without them (each on its own fresh database), leave
every row of the payouts, the ledger, the audit log and the keys the same (new ids and times
aside), and get the same answers. The data plane's successes and the reference path's cases
alike: a replay, a key reused, a refusal recorded, a cancel replayed, a canceled payout
canceled again, a payout unknown."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.http.money import payouts as money_payouts
from tests.integration.http.test_payouts_edge import FUNDED_MINOR, JSON, PATH, _funded, _o, _sepa
from tests.support import edges

# (what it is, path, body, Idempotency-Key, status): sent in order; @P0, @P1: the first two
# payouts made.
REQUESTS: list[tuple[str, str, bytes, str, int]] = [
    ("a payout", PATH, _o(), "p0", 201),
    ("another, with metadata", PATH, _o(amount_minor=250, metadata={"a": "b"}), "p1", 201),
    ("a SEPA payout", PATH, _sepa(amount_minor=777), "p2", 201),
    ("a replay", PATH, _o(), "p0", 201),
    ("a key reused", PATH, _o(amount_minor=5), "p0", 409),
    ("more than the source holds", PATH, _o(amount_minor=FUNDED_MINOR * 2), "p3", 422),
    ("a currency mismatch", PATH, _o(source_account="@E"), "p4", 422),
    ("a date too far", PATH, _o(execute_on="2999-01-01"), "p5", 400),
    ("a cancel", f"{PATH}/@P0/cancel", b"", "c0", 200),
    ("its replay", f"{PATH}/@P0/cancel", b"", "c0", 200),
    ("a canceled payout, a new key", f"{PATH}/@P0/cancel", b"", "c1", 200),
    ("its key on another payout", f"{PATH}/@P1/cancel", b"", "c0", 409),
    ("the other payout canceled", f"{PATH}/@P1/cancel", b"", "c2", 200),
    ("an unknown payout", f"{PATH}/po_nope/cancel", b"", "c3", 404),
]
TABLES = {
    "payouts": "SELECT * FROM payouts ORDER BY id",
    "ledger_accounts": "SELECT * FROM ledger_accounts ORDER BY id",
    "ledger_transfers": "SELECT * FROM ledger_transfers ORDER BY id",
    "ledger_entries": "SELECT * FROM ledger_entries ORDER BY id",
    "events": "SELECT * FROM events ORDER BY id",
    "idempotency_keys": 'SELECT * FROM idempotency_keys ORDER BY "key"',
}


def _rows(database: Database) -> dict[str, list[dict[str, Any]]]:
    """Every row of the tables the two paths write, new ids and times masked (ids are ULIDs:
    in the order they were made, on either database)."""
    with database.read() as connection:
        return {
            table: [
                {column: _masked(column, value) for column, value in row.items()}
                for row in connection.execute(text(sql)).mappings()
            ]
            for table, sql in TABLES.items()
        }


def _masked(column: str, value: Any) -> Any:
    if column.endswith("_at_us") and value is not None:
        return "<time>"
    if column == "fingerprint":
        # A hash of the path and body, which name the ids each database made; that the edge's
        # fingerprint is the route's, test_payouts_edge.py's replays across the edges hold.
        return "<fingerprint>"
    return edges.mask(value) if isinstance(value, str) else value


def test_the_rows_and_answers_are_the_fastapi_routes(
    settings: Settings, database: Database, other: tuple[Settings, Database]
) -> None:
    other_settings, other_database = other
    without = edges.without_edge(other_settings, other_database, money_payouts.ROUTE)
    without.router.routes.remove(money_payouts.CANCEL_ROUTE)
    with TestClient(create_app(settings, database)) as edge, TestClient(without) as route:
        names = [_funded(client) for client in (edge, route)]
        for index, (name, path, body, key, status) in enumerate(REQUESTS):
            answers = []
            for client, made in zip((edge, route), names, strict=True):
                answers.append(edges.post(client, made, path, body, key, JSON if body else None))
                if index in (0, 1):  # @P0, @P1: the payout as this database made it (masked in the answer)
                    made[f"@P{index}".encode()] = (
                        client.get(PATH, params={"limit": 100}).json()["data"][-1]["id"].encode()
                    )
            assert answers[0] == answers[1], name
            assert answers[0][0] == status, (name, answers[0])
    on_loop, on_thread = _rows(database), _rows(other_database)
    assert [len(rows) for rows in on_loop.values()] == [len(rows) for rows in on_thread.values()]
    for table, rows in on_loop.items():
        for mine, theirs in zip(rows, on_thread[table], strict=True):
            assert mine == theirs, (table, {k: (v, theirs[k]) for k, v in mine.items() if theirs[k] != v})
    payouts = {row["status"] for row in on_loop["payouts"]}
    assert payouts == {"canceled", "scheduled"} and len(on_loop["payouts"]) == 3
    refused = [row for row in on_loop["idempotency_keys"] if row["response_status"] == 422]
    assert len(refused) == 2 and all(json.loads(row["response_body"])["error"] for row in refused)
