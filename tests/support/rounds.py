"""What the worker rounds' data-plane tests share (ADR 0026 step 3: `in_doubt/plane.py`; the
payments', refunds' and payouts' `test_rounds_data_plane.py`): the rounds' policy, the statements
of a round counted (`tests.support.statements.counting`), whether a round's apply was its settle
phase's, and the rows a round wrote with what varies between two tenants' identical flows left
out, so that a round on the data plane and one on the reference path compare equal."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection, text

from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope, Outcome, fingerprint
from paycore.kit import actors, ids
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.policy import Policy
from paycore.payments.service import PaymentTimings, create_payment
from paycore.payments.types import NewPayment
from paycore.processor.port import Processor
from paycore.webhooks import repository as webhooks
from tests.support.statements import counting

# Every round's item due again within 2 ms: a test's next round is due at once.
POLICY = Policy(attempts_max=5, backoff_ms=1, backoff_max_ms=2, lease_ms=30_000, batch_max=10)
COMMITS = 2  # each round: its claim's transaction and the item's


def created_payment(
    database: Database, tenant_id: str, processor: Processor, amount_minor: int, *, capture: str = "automatic"
) -> tuple[str, Outcome]:
    """(a new merchant account, the answer of a payment of `amount_minor` to it (`capture`:
    automatic or manual), created by the creating request with `processor` answering its call;
    the resolver's first ask due at once)."""
    destination = database.transaction(
        lambda connection: ledger.create_account(
            connection, tenant_id, code="merchant", currency="USD", normal_balance="credit",
            no_overdraft=False, metadata={}, now_us=now_us(),
        ).id
    )  # fmt: skip
    body = {"amount_minor": amount_minor, "destination": destination}
    if capture != "automatic":
        body["capture"] = capture
    new = NewPayment(amount_minor, "USD", "card", "tok_ok", destination, None, {}, actors.LOCAL, capture)
    scope = KeyScope(tenant_id, f"pay-{time.monotonic_ns()}", fingerprint("POST", "/v1/payments", body), now_us(), None)
    timings = PaymentTimings(processing_stale_ms=60_000, wait_ms=5_000, first_retry_ms=0)
    outcome, _ = create_payment(database, processor, scope, new, timings=timings, render_refusal=render_refusal)
    return destination, outcome


def counted(database: Database, round_: Callable[[], int]) -> list[str]:
    """The statements (and `COMMIT`s) of one round that claims one item."""
    with counting(database) as statements:
        assert round_() == 1
    return statements


def run(statements: list[str]) -> list[str]:
    return [sql for sql in statements if sql != "COMMIT"]


def by_plane(statements: list[str], table: str) -> bool:
    """Whether the round's apply was the settle phase's: its one call (PostgreSQL), or its
    compare-and-set through the driver (SQLite; SQLAlchemy writes `status=?`)."""
    # A payment's authorization (ADR 0029) has its own function, `paycore_payments_authorize`.
    settle, authorize = f"paycore_{table}_settle(", f"paycore_{table}_authorize("
    starts = (f"SELECT {settle}", f"SELECT * FROM {settle}", f"SELECT {authorize}", f"UPDATE {table} SET status = ")
    return any(sql.startswith(starts) for sql in statements)


def events(connection: Connection, tenant_id: str, object_id: str) -> list[Any]:
    """An object's events (kind, type, states, cause, actor, sequence, data, snapshot), as `kept`
    keeps them, in the order they were made."""
    rows = connection.execute(
        text(
            "SELECT kind, type, from_state, to_state, cause, actor, object_sequence, data, snapshot"
            " FROM events WHERE tenant_id = :t AND object_id = :o ORDER BY created_at_us, id"
        ),
        {"t": tenant_id, "o": object_id},
    ).all()
    return [kept(tuple(event)) for event in rows]


def kept_rows(connection: Connection, tenant_id: str, hold_id: str) -> dict[str, Any]:
    """A hold's transfers (the hold, its resolution) and their entries, as `kept` keeps them."""
    hold = {"t": tenant_id, "h": hold_id}
    transfers = connection.execute(
        text(
            "SELECT kind, reference_type, metadata, pending_id IS NOT NULL FROM ledger_transfers"
            " WHERE tenant_id = :t AND (id = :h OR pending_id = :h) ORDER BY created_at_us, id"
        ),
        hold,
    ).all()
    entries = connection.execute(
        text(
            "SELECT e.direction, e.amount_minor, e.currency, e.account_sequence FROM ledger_entries e"
            " JOIN ledger_transfers t ON t.tenant_id = e.tenant_id AND t.id = e.transfer_id"
            " WHERE t.tenant_id = :t AND (t.id = :h OR t.pending_id = :h) ORDER BY e.id"
        ),
        hold,
    ).all()
    return {"transfers": [kept(tuple(row)) for row in transfers], "entries": [tuple(row) for row in entries]}


def _varies(name: str) -> bool:
    """A column or key that differs between two tenants' identical flows: an id, a reference, a
    time (a history entry's `at`), a latency."""
    return name in ("id", "at", "latency_ms", "idempotency_key") or name.endswith(("_id", "_us", "_at", "_reference"))


_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")  # an id's ULID, wherever it is quoted


def kept(document: Any) -> Any:
    """`document` (a row, an event's columns, a JSON text in them) with what varies between two
    tenants' identical flows left out (`_varies`) or masked (an id quoted in a text)."""
    if isinstance(document, dict):
        return {k: kept(v) for k, v in document.items() if not _varies(str(k))}
    if isinstance(document, list | tuple):
        return [kept(v) for v in document]
    if isinstance(document, str) and document[:1] in ("{", "["):
        return kept(json.loads(document))
    return _ID.sub("ID", document) if isinstance(document, str) else document


def differences(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> dict[str, Any]:
    """What two rounds' facts differ in, key by key: (the data plane's, the reference path's)."""
    return {key: (value, theirs[key]) for key, value in mine.items() if theirs[key] != value}


def endpoint(database: Database, tenant_id: str) -> None:
    """A webhook endpoint taking every event of the tenant: each published event queues a
    delivery (the outbox, migration 0015's trigger), which a test can compare."""
    now = now_us()
    values = {
        "tenant_id": tenant_id, "id": ids.new_id("we"), "url": "https://rounds.example/hook",
        "events": json.dumps(["*"]), "description": None, "status": "enabled", "disabled_reason": None,
        "secret": "not-a-secret", "previous_secret": None, "previous_secret_until_us": None, "failures": 0,
        "failing_since_us": None, "last_error": None, "blocked_until_us": None, "claimed_by": None,
        "claimed_until_us": None, "served_at_us": None, "created_at_us": now, "updated_at_us": now,
    }  # fmt: skip
    database.transaction(lambda connection: webhooks.insert_endpoint(connection, values))


def outbox(connection: Connection, tenant_id: str, object_id: str) -> list[Any]:
    """The deliveries queued for an object's events: each event's type and its delivery's state."""
    rows = connection.execute(
        text(
            "SELECT e.type, d.status, d.attempts FROM webhook_deliveries d JOIN events e"
            " ON e.tenant_id = d.tenant_id AND e.id = d.event_id"
            " WHERE d.tenant_id = :t AND e.object_id = :o ORDER BY e.created_at_us, e.id"
        ),
        {"t": tenant_id, "o": object_id},
    ).all()
    return [tuple(row) for row in rows]
