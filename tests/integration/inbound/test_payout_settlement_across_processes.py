"""The bank's `settled` webhook and the payout resolver's status query, racing to settle the same
sent payouts from two OS processes on PostgreSQL (ADR 0026 step 3): each payout is paid out, and
its bank's fee booked, exactly once.

The payouts are sent first (the bank accepted them: `sent`, a status query still due). Then one
process delivers each payout's signed `payout.settled` webhook with the bank's fee
(`inbound.receive.receive`, as the route does: the read and one call of
`paycore_inbound_settle_payout`, or the reference path where the payout moved between the read
and the call), last payout first; the other runs the resolver's rounds
(`payouts.rounds.resolve_due`: claim a few due payouts, ask the bank, which says `settled` with
the same fee, apply it FOR UPDATE), first payout first. They meet in the middle, each side seen
to win some. Whoever comes second changes nothing: one transfer from the in-transit account to
the bank's cash, one fee transfer and one `bank:fee` adjustment, one state change to `settled`
(the webhook's or the resolver's), and the webhook's answer `applied` exactly where it won.
"""

from __future__ import annotations

from collections import Counter
from typing import cast

import pytest
from sqlalchemy import text

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payouts import rounds as payout_rounds
from paycore.payouts import service as payouts
from paycore.payouts.types import NewPayout
from paycore.processor.port import PayoutRequest, PayoutResult, Processor
from tests.integration.inbound.racing import race, until_both_win
from tests.integration.inbound.racing import winners as racing_winners
from tests.integration.inbound.test_apply_payout_across_processes import (
    ACH,
    AMOUNT_MINOR,
    PAYOUTS,
    ROUNDS_MAX,
    _policy,
    resolver_process,
)
from tests.support import payout_webhooks
from tests.support.payouts import funded_source

TENANT = "race_settle"
FEE_MINOR = 15


class _Bank:
    """The bank: a send is accepted into a batch; asked about later, the payout settled."""

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        return PayoutResult(request.request_id, "accepted", f"bp_{request.request_id}", AMOUNT_MINOR, "USD", "ach")

    def get_payout(self, request_id: str) -> PayoutResult:
        return PayoutResult(
            request_id, "settled", f"bp_{request_id}", AMOUNT_MINOR, "USD", "ach", batch_id="b1", fee_minor=FEE_MINOR
        )


def test_a_settled_webhook_and_the_resolver_racing_pay_each_payout_out_once(
    database: Database, settings: Settings
) -> None:
    if not database.is_postgres:
        pytest.skip("SQLite serialises every writer at BEGIN IMMEDIATE: the race is PostgreSQL's")

    def race_once() -> Counter[str]:
        source = funded_source(database, TENANT, PAYOUTS * AMOUNT_MINOR)
        payout_ids = _sent(database, source)
        results, rounds = race(settings.database_url, payout_ids, _event, resolver_process, (_Bank(),))
        assert rounds <= ROUNDS_MAX
        return racing_winners(payout_ids, results, lambda object_id: _check_one(database, object_id))

    winners, races = until_both_win(race_once)
    with database.read() as connection:
        bank_cash = ledger.find_account_by_code(connection, TENANT, "bank.cash.USD")
        in_transit = ledger.find_account_by_code(connection, TENANT, "payouts.in_transit.USD")
        assert ledger.verify(connection).problems == []
    assert bank_cash is not None and in_transit is not None
    # The bank's cash (debit-normal) paid every payout of every race and its fee once; nothing left in transit.
    assert bank_cash.balance.posted_minor == -races * PAYOUTS * (AMOUNT_MINOR + FEE_MINOR), "every payout paid out once"
    assert in_transit.balance.posted_minor == 0
    print(f"settled by: {dict(winners)}")


def _sent(database: Database, source: str) -> list[str]:
    """The payouts, scheduled, queued and sent: each `sent`, its status query due."""
    new = NewPayout(AMOUNT_MINOR, "USD", source, "ach", ACH)
    made = [
        database.transaction(
            lambda connection: payouts.schedule(connection, TENANT, new, now_us=now_us(), actor=actors.LOCAL)
        ).id
        for _ in range(PAYOUTS)
    ]
    assert payout_rounds.queue_due(database, PAYOUTS, actor=actors.worker("queue")) == PAYOUTS
    bank = cast(Processor, _Bank())
    assert payout_rounds.send_due(database, bank, _policy(PAYOUTS), "sender", actor=actors.worker("send")) == PAYOUTS
    with database.read() as connection:
        found = payouts.MACHINE.find_many(connection, [(TENANT, payout_id) for payout_id in made])
    assert {payout.status for payout in found.values()} == {"sent"}, found
    return made


def _check_one(database: Database, payout_id: str) -> str:
    """The payout's rows, once each; returns who settled it (the cause of its last change)."""
    params = {"t": TENANT, "p": payout_id}
    with database.read() as connection:
        transfers = connection.execute(
            text(
                "SELECT kind, reference_type FROM ledger_transfers WHERE tenant_id = :t AND owner_id = :p"
                " ORDER BY kind, reference_type"
            ),
            params,
        ).all()
        adjustments = connection.execute(
            text("SELECT kind, amount_minor FROM payout_adjustments WHERE tenant_id = :t AND payout_id = :p"), params
        ).all()
        changes, stored = payout_webhooks.state_changes(connection, TENANT, payout_id)
    expected_transfers = [("pending", "payout"), ("post", "payout"), ("transfer", "adjustment"), ("transfer", "payout")]
    assert [tuple(row) for row in transfers] == expected_transfers, (payout_id, transfers)
    assert [tuple(row) for row in adjustments] == [("fee", FEE_MINOR)], (payout_id, adjustments)
    expected = [("scheduled", 1), ("queued", 2), ("processing", 3), ("sent", 4), ("settled", 5)]
    return payout_webhooks.winner(changes, expected, stored)


# ------------------------------------------------------------------ the two processes


def _event(payout_id: str) -> bytes:
    return payout_webhooks.event_body(
        TENANT,
        payout_id,
        "settled",
        event_id=f"evt_{payout_id}",
        sequence=1,
        created_at="",
        amount_minor=AMOUNT_MINOR,
        batch_id="b1",
        fee_minor=FEE_MINOR,
    )
