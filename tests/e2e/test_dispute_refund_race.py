"""Rule zero with disputes across OS processes (SPEC §6.2, §7; issue 41): a chargeback arriving
while refunds of the same payment are requested, on different API processes.

Two `paycore serve` processes on the test's database. Round after round, on a fresh payment of
1,000: three refunds of 300 (all three fit without a chargeback, so any refusal is the
chargeback's doing) and the processor's `dispute.created` for a chargeback of 400, twice under
two event ids (as a processor redelivers), are released at once across both servers. Whatever
order the database picks, each refund stored must have fitted at its moment: replayed in the
order the merchant account's entries were written (its row lock is taken under the payment's,
so that order is the payment's serialization order), the refunds before it plus the chargebacks
recorded before it plus itself never pass 1,000. The chargeback is recorded once and never
refused, and the books verify. On PostgreSQL, and on one SQLite file shared by the processes.
"""

from __future__ import annotations

import itertools
import json
import time
from http.client import HTTPConnection
from typing import Any

import pytest
from sqlalchemy import text

from paycore.db.engine import Database
from paycore.kit import signing
from paycore.kit.clock import to_rfc3339
from paycore.ledger import service as ledger
from tests.e2e.support import StartServers, assert_ledger_verifies, call, run_together
from tests.support.refunds import CURRENCY, new_payment

TENANT = "dispute-race"
SECRET = "whsec_dispute_race"
ROUNDS = 12
PAID_MINOR = 1000
REFUND_MINOR = 300
REFUNDS_PER_ROUND = 3  # 900: all fit without the chargeback
CHARGEBACK_MINOR = 400
FEE_MINOR = 1500
HEADERS = {"Paycore-Tenant": TENANT}


def open_merchant(database: Database, number: int) -> str:
    """A merchant account of its own per round, without `no_overdraft`: the chargeback's fee
    takes it below zero, and this test is about rule zero alone (a refund refused for the
    merchant's balance would be `insufficient_funds`, another rule)."""

    def work(connection: Any) -> str:
        return ledger.create_account(
            connection,
            TENANT,
            code=f"merchant.{number}",
            currency=CURRENCY,
            normal_balance="credit",
            no_overdraft=False,
            metadata={},
            now_us=0,
        ).id

    return str(database.transaction(work))


def dispute_event(event_id: str, payment_id: str) -> bytes:
    now_s = int(time.time())
    data = {
        "object": "dispute",
        "dispute_id": f"dp_sbx_{payment_id}",
        "charge_request_id": payment_id,
        "payment_reference": f"ch_{payment_id}",
        "merchant_id": TENANT,
        "type": "chargeback",
        "status": "needs_response",
        "reason": "fraudulent",
        "amount_minor": CHARGEBACK_MINOR,
        "currency": "USD",
        "fee_minor": FEE_MINOR,
        "evidence_due_by": to_rfc3339((now_s + 7 * 86_400) * 1_000_000),
        "evidence_submitted": False,
        "created_at": to_rfc3339(now_s * 1_000_000),
        "closed_at": None,
    }
    event = {"id": event_id, "type": "dispute.created", "created_at": data["created_at"], "sequence": 1, "data": data}
    return json.dumps(event, separators=(",", ":")).encode()


def post_webhook(port: int, body: bytes) -> int:
    connection = HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        signature = signing.sign(SECRET, int(time.time()), body)
        headers = {"Content-Type": "application/json", signing.SIGNATURE_HEADER: signature}
        connection.request("POST", "/v1/webhooks/processor", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return int(response.status)
    finally:
        connection.close()


def serialization_order(database: Database, merchant: str, payment_id: str) -> list[tuple[str, int]]:
    """("refund" | "dispute", amount) of the payment, in the order the merchant's entries were written."""
    query = text(
        "SELECT CASE WHEN t.owner_id LIKE 'dp\\_%' ESCAPE '\\' THEN 'dispute' ELSE 'refund' END AS kind,"
        " COALESCE(r.amount_minor, d.amount_minor) AS amount"
        " FROM ledger_entries e JOIN ledger_transfers t ON t.tenant_id = e.tenant_id AND t.id = e.transfer_id"
        " LEFT JOIN refunds r ON r.tenant_id = t.tenant_id AND r.id = t.owner_id"
        " LEFT JOIN disputes d ON d.tenant_id = t.tenant_id AND d.id = t.owner_id"
        " WHERE e.tenant_id = :t AND e.account_id = :a AND (r.payment_id = :p OR d.payment_id = :p)"
        " ORDER BY e.account_sequence"
    )
    with database.read() as connection:
        rows = connection.execute(query, {"t": TENANT, "a": merchant, "p": payment_id}).all()
    return [(str(row.kind), int(row.amount)) for row in rows]


def race_one(ports: list[int], payment_id: str, keys: Any) -> list[Any]:
    sent = [(ports[index % 2], f"race-{next(keys)}") for index in range(REFUNDS_PER_ROUND)]

    def work(index: int) -> Any:
        if index < REFUNDS_PER_ROUND:
            port, key = sent[index]
            reply = call(
                port,
                "POST",
                f"/v1/payments/{payment_id}/refunds",
                {"amount_minor": REFUND_MINOR},
                headers={**HEADERS, "Idempotency-Key": key},
            )
            assert reply.status in (201, 422), reply
            return reply.status if reply.status == 201 else reply.body["error"]
        body = dispute_event(f"evt_sbx_{payment_id}_{index}", payment_id)
        return post_webhook(ports[index % 2], body)

    return run_together(REFUNDS_PER_ROUND + 2, work)


@pytest.mark.slow
def test_refunds_racing_a_chargeback_on_two_servers_never_pass_what_was_captured(
    database_url: str, database: Database, serve_processes: StartServers
) -> None:
    servers = serve_processes(2, database_url, PAYCORE_PROCESSOR_WEBHOOK_SECRET=SECRET)
    ports = [server.port for server in servers]
    keys = itertools.count()
    accepted_counts = []
    for number in range(ROUNDS):
        merchant = open_merchant(database, number)
        payment_id = new_payment(database, TENANT, merchant, PAID_MINOR)
        results = race_one(ports, payment_id, keys)
        assert results[REFUNDS_PER_ROUND:] == [200, 200], results
        assert all(result in (201, "over_refund") for result in results[:REFUNDS_PER_ROUND]), results
        order = serialization_order(database, merchant, payment_id)
        assert [kind for kind, _ in order].count("dispute") == 1, order  # recorded once, never refused
        held = 0
        for kind, amount in order:
            if kind == "refund":
                assert held + amount <= PAID_MINOR, order  # rule zero at the refund's own moment
            held += amount
        accepted = results[:REFUNDS_PER_ROUND].count(201)
        assert accepted == [kind for kind, _ in order].count("refund")
        shown = call(ports[0], "GET", f"/v1/payments/{payment_id}", headers=HEADERS).body
        assert (shown["refunded_minor"], shown["disputed_minor"]) == (accepted * REFUND_MINOR, CHARGEBACK_MINOR)
        accepted_counts.append(accepted)
    print(f"refunds accepted per round (of {REFUNDS_PER_ROUND}): {accepted_counts}")
    assert min(accepted_counts) < REFUNDS_PER_ROUND, "the chargeback never came first: nothing raced"
    assert_ledger_verifies(database_url)
