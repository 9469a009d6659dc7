"""The bank's payout webhook and the payout resolver's status query, racing to move the same
payouts from two OS processes on PostgreSQL (ADR 0026 step 3): each payout's hold is posted
exactly once.

The payouts are sent and made `in_doubt` first (the bank's answer lost). Then one process
delivers each payout's signed `payout.accepted` webhook (`inbound.receive.receive`, as the route
does: the read and one call of `paycore_inbound_apply_payout`, or the reference path where the
payout moved between the read and the call), last payout first; the other runs the resolver's
rounds (`payouts.rounds.resolve_due`: claim a few due payouts, ask the bank, which says `accepted`,
apply it FOR UPDATE), first payout first. They meet in the middle, each side seen to win some.
Whoever comes second changes nothing: one post, its two entries, one state change to `sent`
(the webhook's or the resolver's), the money moved once, and the webhook's answer `applied`
exactly where it won.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import pytest
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.lifecycle.policy import Policy
from paycore.payouts import rounds as payout_rounds
from paycore.payouts import service as payouts
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary
from paycore.processor.port import PayoutRequest, PayoutResult, Processor, ProcessorUnreachable
from tests.integration.inbound.racing import race, until_both_win
from tests.integration.inbound.racing import winners as racing_winners
from tests.integration.payments.test_settle_across_processes import _database
from tests.support import payout_webhooks
from tests.support.payouts import funded_source

TENANT = "race"
PAYOUTS = 24
AMOUNT_MINOR = 700
BATCH_MAX = 2  # the resolver's claim per round: small, so the two sides meet in the middle
ROUNDS_MAX = 200  # the resolver's rounds, bounded
ACH = Beneficiary(name="Ada Lovelace", routing_number="110000000", account_number="000123456789")


class _Bank:
    """The bank: a send's answer is lost (`lost`), or, asked about, the payout was accepted."""

    def __init__(self, *, lost: bool) -> None:
        self.lost = lost

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        if self.lost:
            raise ProcessorUnreachable("the answer was lost")
        return self._accepted(request.request_id)

    def get_payout(self, request_id: str) -> PayoutResult:
        return self._accepted(request_id)

    def _accepted(self, request_id: str) -> PayoutResult:
        return PayoutResult(request_id, "accepted", f"bp_{request_id}", AMOUNT_MINOR, "USD", "ach", batch_id="b1")


def _policy(batch_max: int) -> Policy:
    return Policy(attempts_max=5, backoff_ms=1, backoff_max_ms=2, lease_ms=30_000, batch_max=batch_max)


def test_a_payout_webhook_and_the_resolver_racing_post_each_hold_once(database: Database, settings: Settings) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")

    def race_once() -> Counter[str]:
        source = funded_source(database, TENANT, PAYOUTS * AMOUNT_MINOR)
        payout_ids = _in_doubt(database, source)
        results, rounds = race(settings.database_url, payout_ids, _event, resolver_process)
        assert rounds <= ROUNDS_MAX
        found = racing_winners(payout_ids, results, lambda object_id: _check_one(database, object_id))
        with database.read() as connection:
            account = ledger.get_account(connection, TENANT, source)
            assert ledger.verify(connection).problems == []
        assert (account.balance.posted_minor, account.balance.pending_minor) == (0, 0), "every payout taken once"
        return found

    winners, _races = until_both_win(race_once)
    print(f"moved by: {dict(winners)}")


def _in_doubt(database: Database, source: str) -> list[str]:
    """The payouts, scheduled, queued and sent, the bank's answers lost: each `in_doubt`."""
    new = NewPayout(AMOUNT_MINOR, "USD", source, "ach", ACH)
    made = [
        database.transaction(
            lambda connection: payouts.schedule(connection, TENANT, new, now_us=now_us(), actor=actors.LOCAL)
        ).id
        for _ in range(PAYOUTS)
    ]
    assert payout_rounds.queue_due(database, PAYOUTS, actor=actors.worker("queue")) == PAYOUTS
    lost = cast(Processor, _Bank(lost=True))
    assert payout_rounds.send_due(database, lost, _policy(PAYOUTS), "sender", actor=actors.worker("send")) == PAYOUTS
    with database.read() as connection:
        found = payouts.MACHINE.find_many(connection, [(TENANT, payout_id) for payout_id in made])
    assert {payout.status for payout in found.values()} == {"in_doubt"}, found
    return made


def _check_one(database: Database, payout_id: str) -> str:
    """The payout's rows, once each; returns who moved it (the cause of its last change)."""
    params = {"t": TENANT, "p": payout_id}
    with database.read() as connection:
        kinds = [
            row[0]
            for row in connection.execute(
                text("SELECT kind FROM ledger_transfers WHERE tenant_id = :t AND owner_id = :p ORDER BY kind"), params
            )
        ]
        entries = connection.execute(
            text(
                "SELECT count(*) FROM ledger_entries e JOIN ledger_transfers t ON t.tenant_id = e.tenant_id"
                " AND t.id = e.transfer_id WHERE t.tenant_id = :t AND t.owner_id = :p"
            ),
            params,
        ).scalar_one()
        changes, stored = payout_webhooks.state_changes(connection, TENANT, payout_id)
    assert kinds == ["pending", "post"] and entries == 4, (payout_id, kinds, entries)
    expected = [("scheduled", 1), ("queued", 2), ("processing", 3), ("in_doubt", 4), ("sent", 5)]
    return payout_webhooks.winner(changes, expected, stored)


# ------------------------------------------------------------------ the two processes


def _event(payout_id: str) -> bytes:
    return payout_webhooks.event_body(
        TENANT,
        payout_id,
        "accepted",
        event_id=f"evt_{payout_id}",
        sequence=1,
        created_at="",
        amount_minor=AMOUNT_MINOR,
        batch_id="b1",
    )


def resolver_process(url: str, barrier: Any, rounds: Any, bank: Any = None) -> None:
    """Run the resolver's rounds, asking `bank` (by default one that says `accepted`)."""
    database = _database(url)
    bank = cast(Processor, _Bank(lost=False) if bank is None else bank)
    barrier.wait()
    done = 0
    while done < ROUNDS_MAX:
        done += 1
        if (
            payout_rounds.resolve_due(
                database, bank, _policy(BATCH_MAX), "resolver-race", actor=actors.worker("resolve")
            )
            == 0
        ):
            break
    rounds.put(done)
    database.dispose()
