"""Four eyes by sum across OS processes (SPEC §7.1): refunds of one payment made at the same
moment on different API processes never all escape approval when together they pass the
tenant's threshold.

Two `paycore serve` processes on the test's database. Round after round, on a fresh payment of
3,000 (threshold 1,000), four requests for a refund of 600 are released at once, two to each
server. Each refund's approval is decided from the sum its payment's row holds after the
refund's own reservation (one conditional UPDATE, serialised on the row), so in every round
exactly one refund goes (600) and three wait for a person (1,200, 1,800, 2,400), whatever
order the database picks. A decision from a separate read of the sum races: on PostgreSQL two
requests both read the sum without the other and both go. On PostgreSQL, and on one SQLite
file shared by the two processes.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from paycore.db.engine import Database
from tests.e2e.support import StartServers, call, run_together
from tests.support.refunds import assert_rule_zero, new_payment, open_merchant

TENANT = "approval-race"
ROUNDS = 25
PAID_MINOR = 3000
THRESHOLD_MINOR = 1000
REFUND_MINOR = 600  # one alone is within the threshold, any two together pass it
REFUNDS_PER_ROUND = 4  # 2,400: all fit in the payment, so none is refused for rule zero
HEADERS = {"Paycore-Tenant": TENANT}


@pytest.mark.slow
def test_refunds_racing_on_two_servers_never_split_past_the_threshold(
    database_url: str, database: Database, serve_processes: StartServers
) -> None:
    servers = serve_processes(2, database_url)
    ports = [server.port for server in servers]
    put = call(ports[0], "PUT", "/v1/settings", {"refund_approval_threshold_minor": THRESHOLD_MINOR}, headers=HEADERS)
    assert put.status == 200, put
    merchant = open_merchant(database, TENANT)
    keys = itertools.count()
    rounds: Counter[tuple[str, ...]] = Counter()
    for _ in range(ROUNDS):
        payment_id = new_payment(database, TENANT, merchant, PAID_MINOR)
        sent = [(ports[index % 2], f"race-{next(keys)}") for index in range(REFUNDS_PER_ROUND)]

        def refund(index: int, payment_id: str = payment_id, sent: list[tuple[int, str]] = sent) -> str:
            port, key = sent[index]
            reply = call(
                port,
                "POST",
                f"/v1/payments/{payment_id}/refunds",
                {"amount_minor": REFUND_MINOR},
                headers={**HEADERS, "Idempotency-Key": key},
            )
            assert reply.status == 201, reply
            return str(reply.body["status"])

        results = run_together(REFUNDS_PER_ROUND, refund)
        assert all(isinstance(result, str) for result in results), results
        rounds[tuple(sorted(results))] += 1
    assert rounds == Counter({("pending", *["requires_approval"] * (REFUNDS_PER_ROUND - 1)): ROUNDS}), rounds
    books = assert_rule_zero(database, TENANT)
    assert [book.refunded_minor for book in books] == [REFUNDS_PER_ROUND * REFUND_MINOR] * ROUNDS
