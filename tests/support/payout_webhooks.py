"""The bank's webhooks about a payout, shared by the data plane's tests of each (`accepted` and
`rejected`, `settled`, `returned`: tests/integration/inbound/): the event's body, a migration's
function dropped for a test of the schema one revision behind, the route's delivery, and what the
payout's rows say across processes."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from sqlalchemy import Connection, text

from paycore.db.engine import Database
from paycore.db.migrate import MIGRATIONS_PATH
from paycore.kit import signing
from paycore.kit.clock import now_us


def event_body(
    tenant_id: str,
    payout_id: str,
    word: str,
    *,
    event_id: str,
    sequence: int,
    created_at: str = "2026-12-06T00:00:00Z",
    **data: Any,
) -> bytes:
    """The bank's `payout.<word>` about the payout, its amount and rail as `data` says."""
    fields: dict[str, Any] = {
        "object": "payout",
        "request_id": payout_id,
        "merchant_id": tenant_id,
        "status": word,
        "currency": "USD",
        "rail": "ach",
        "bank_payout_id": f"bp_{payout_id}",
    }
    document = {
        "id": event_id,
        "type": f"payout.{word}",
        "created_at": created_at,
        "sequence": sequence,
        "data": {**fields, **data},
    }
    return json.dumps(document).encode()


def migration(pattern: str) -> ModuleType:
    """The one migration whose file name matches `*_<pattern>.py`, loaded as a module."""
    [path] = (MIGRATIONS_PATH / "versions").glob(f"*_{pattern}.py")
    spec = importlib.util.spec_from_file_location(f"{pattern}_migration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def function_dropped(database: Database, signature: str, create: str) -> Iterator[None]:
    """A PostgreSQL schema one revision behind for the body of the block: the function with
    `signature` dropped, then put back (`create`) whatever the block did."""
    with database.autocommit() as connection:
        connection.execute(text(f"DROP FUNCTION {signature}"))
    try:
        yield
    finally:
        with database.autocommit() as connection:
            connection.execute(text(create))


def post_webhook(client: Any, secret: str, body: bytes) -> Any:
    """`POST /v1/webhooks/processor` with the body signed now."""
    signature = signing.sign(secret, now_us() // 1_000_000, body)
    headers = {signing.SIGNATURE_HEADER: signature, "Content-Type": "application/json"}
    return client.post("/v1/webhooks/processor", content=body, headers=headers)


def state_changes(connection: Connection, tenant_id: str, payout_id: str) -> tuple[list[Any], int]:
    """The payout's state changes (to_state, cause, object_sequence) in order, and how many of the
    bank's events were stored about it."""
    params = {"t": tenant_id, "p": payout_id}
    changes = connection.execute(
        text(
            "SELECT to_state, cause, object_sequence FROM events WHERE tenant_id = :t AND object_id = :p"
            " AND kind = 'state_change' ORDER BY object_sequence"
        ),
        params,
    ).all()
    stored = connection.execute(
        text("SELECT count(*) FROM processor_webhooks WHERE tenant_id = :t AND request_id = :p"), params
    ).scalar_one()
    return list(changes), int(stored)


def winner(changes: list[Any], expected: list[tuple[str, int]], stored: int) -> str:
    """Which process moved the payout last: the webhook's, or the resolver's (its cause: the
    bank's answer), once its changes are `expected` and its event stored once."""
    assert [(row[0], row[2]) for row in changes] == expected, changes
    last = changes[len(expected) - 1][1]
    assert last in ("webhook", "bank_answer") and stored == 1, (changes, stored)
    return "webhook" if last == "webhook" else "resolver"
