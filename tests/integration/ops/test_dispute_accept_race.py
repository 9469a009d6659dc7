"""Two people asking to accept the same dispute at the same moment (issue 41 point 4,
`disputes.approvals.request`): each ask holds the dispute's row lock, so exactly one request is
recorded and the other is AcceptPending, on both databases (PostgreSQL: two connections racing
on the row; SQLite: writers serialised). Released together by a barrier, several times over."""

from __future__ import annotations

import threading
from typing import Any

from paycore.disputes import approvals
from paycore.disputes import service as disputes
from paycore.disputes.errors import AcceptPending
from paycore.kit.clock import now_us
from tests.integration.ops.conftest import Console
from tests.integration.ops.dispute_support import opened, records

ROUNDS = 4
JOIN_TIMEOUT_S = 30


def test_two_people_asking_at_once_make_one_request(console: Console) -> None:
    for round_number in range(ROUNDS):
        listed = opened(console, 5000)
        outcomes = race(console, listed["id"], f"race-{round_number}")
        asked = [outcome for outcome in outcomes.values() if isinstance(outcome, str)]
        refused = [outcome for outcome in outcomes.values() if isinstance(outcome, AcceptPending)]
        assert (len(asked), len(refused)) == (1, 1), outcomes
        notes = [(e.type, e.actor) for e in records(console, listed) if e.kind == "note"]
        assert notes == [("dispute.accept_requested", asked[0])], notes
        with console.env.database.read() as connection:
            dispute = disputes.find_any(connection, listed["id"], tenant_id=None)
            assert dispute is not None
            pending = approvals.open_request(connection, dispute)
        assert pending is not None and pending.requested_by == asked[0]


def race(console: Console, dispute_id: str, key: str) -> dict[str, Any]:
    """alice and bob ask at once, each with a key of their own: who asked, or the refusal."""
    database = console.env.database
    with database.read() as connection:
        dispute = disputes.find_any(connection, dispute_id, tenant_id=None)
    assert dispute is not None
    barrier = threading.Barrier(2, timeout=JOIN_TIMEOUT_S)
    outcomes: dict[str, Any] = {}

    def ask(name: str) -> None:
        barrier.wait()
        try:
            made = database.transaction(
                lambda connection: approvals.request(
                    connection,
                    dispute,
                    key=f"{key}-{name}",
                    threshold_minor=100,
                    actor=f"operator:{name}",
                    now_us=now_us(),
                )
            )
            outcomes[name] = made.requested_by
        except AcceptPending as error:
            outcomes[name] = error

    threads = [threading.Thread(target=ask, args=(name,)) for name in ("alice", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    return outcomes
