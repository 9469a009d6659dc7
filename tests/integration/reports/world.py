"""The loss report's fixture set, built through the real service code: funded source accounts
(ledger transfers), `payouts.service.schedule`, the transition table (`lifecycle.MACHINE.move`), the
bank's answers (`lifecycle.apply_evidence` with `PayoutResult`s: fees at settlement, returns and their
fees) and people's adjustments (`adjustments.record_from_api`). Every step is its own
transaction at a chosen UTC moment, so each adjustment's `effective_on` is the day named here.

The losses each payout should show are worked out by hand in the tests, as literal integers
(docs/losses.md has the same examples in words). Names, for tenant `acme` unless said:

| name          | rail | amount | what happens (day, 2026)                                                    |
|---------------|------|--------|-----------------------------------------------------------------------------|
| ach_returned  | ach  | 10,000 | settled 01-06 fee 25; returned R02 01-07: 10,000 back, return fee 200       |
| sepa_short    | sepa | 50,000 | settled 01-13 fee 20; returned AC04 01-14: 49,900 back, return fee 500      |
| charged_back  | ach  | 20,000 | settled 01-20 fee 25; chargeback 20,000 on 01-26; recovery 15,000 on 02-10  |
| fee_reversed  | ach  |  8,000 | settled 01-27 fee 25; fee reversal 25 on 02-03                              |
| fee_only_1    | ach  |  3,000 | settled 01-08 fee 25                                                        |
| fee_only_2    | ach  |  4,000 | settled 01-09 fee 25                                                        |
| chargeback_won| sepa | 30,000 | settled 02-02, no fee; chargeback 30,000 on 02-05; reversed 30,000 on 02-20 |
| sepa_refund   | sepa | 40,000 | settled 01-21 fee 20; returned MS03 01-22: 39,000 back; refund 400 on 03-02 |
| canceled      | ach  |  7,000 | scheduled 01-05, canceled: no adjustment                                    |
| no_fee        | ach  |  6,000 | settled 01-06, no fee: no adjustment                                        |
| globex        | ach  | 10,000 | tenant `globex`: settled 01-15 fee 25; chargeback 1,000 on 01-20            |
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.lifecycle.evidence import Evidence
from paycore.payouts import adjustments, lifecycle, states
from paycore.payouts import service as payouts
from paycore.payouts.adjustments import NewAdjustment
from paycore.payouts.types import NewPayout, Payout
from paycore.payouts.validation import Beneficiary
from paycore.processor.port import PayoutResult

ACME = "acme"
GLOBEX = "globex"
FUNDING_MINOR = 1_000_000
CURRENCY_OF = {"ach": "USD", "sepa": "EUR"}
BENEFICIARY = {
    "ach": Beneficiary("Ada Lovelace", routing_number="011000015", account_number="123456789"),
    "sepa": Beneficiary("Ada Lovelace", iban="DE89370400440532013000"),
}


def at(day: str, hour: int) -> int:
    """Microseconds at `hour`:00 UTC of `day` (YYYY-MM-DD)."""
    moment = dt.datetime.fromisoformat(day).replace(hour=hour, tzinfo=dt.UTC)
    return int(moment.timestamp()) * 1_000_000


class World:
    """Writes the fixture set; `ids[name]` is each payout's id."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.ids: dict[str, str] = {}
        self.sources: dict[tuple[str, str], str] = {}

    def run(self, work: Any) -> Any:
        return self.database.transaction(work)

    def fund(self, tenant_id: str, currency: str) -> str:
        """A seller's balance (credit-normal, no overdraft) funded from a debit-normal account."""

        def work(connection: Connection) -> str:
            now_us = at("2026-01-01", 8)
            found = {}
            for code, normal, no_overdraft in (("seller", "credit", True), ("funding", "debit", False)):
                found[code] = ledger.create_account(
                    connection,
                    tenant_id,
                    code=f"{code}.{currency}",
                    currency=currency,
                    normal_balance=normal,
                    no_overdraft=no_overdraft,
                    metadata={},
                    now_us=now_us,
                ).id
            entries = (
                EntrySpec(found["funding"], "debit", FUNDING_MINOR),
                EntrySpec(found["seller"], "credit", FUNDING_MINOR),
            )
            ledger.create_transfer(
                connection,
                tenant_id,
                TransferSpec(entries=entries, currency=currency, reference_type="credit"),
                now_us=now_us,
            )
            return found["seller"]

        self.sources[(tenant_id, currency)] = self.run(work)
        return self.sources[(tenant_id, currency)]

    def schedule(self, name: str, tenant_id: str, rail: str, amount_minor: int, day: str) -> Payout:
        currency = CURRENCY_OF[rail]
        source = self.sources.get((tenant_id, currency)) or self.fund(tenant_id, currency)
        new = NewPayout(amount_minor, currency, source, rail, BENEFICIARY[rail])
        payout: Payout = self.run(lambda c: payouts.schedule(c, tenant_id, new, actor="local", now_us=at(day, 9)))
        self.ids[name] = payout.id
        return payout

    def send(self, payout: Payout, day: str) -> Payout:
        """scheduled -> queued -> processing, as a worker claims it on its day."""

        def work(connection: Connection) -> Payout:
            current = payout
            for step, cause in ((states.QUEUED, "due"), (states.PROCESSING, "claimed")):
                moved = lifecycle.MACHINE.move(
                    connection, current, step, cause=cause, actor="worker:send_payouts", now_us=at(day, 10)
                )
                assert moved.changed
                current = moved.item
            return current

        sent: Payout = self.run(work)
        return sent

    def bank(self, payout: Payout, day: str, status: str, **facts: Any) -> Payout:
        """The bank's answer on `day`, applied as a webhook would be."""
        result = PayoutResult(
            request_id=f"req-{payout.id}-{status}",
            status=status,  # type: ignore[arg-type]
            bank_payout_id=f"bank-{payout.id}",
            amount_minor=payout.amount_minor,
            currency=payout.currency,
            rail=payout.rail,  # type: ignore[arg-type]
            **facts,
        )

        def work(connection: Connection) -> Payout:
            current = payouts.MACHINE.load(connection, payout.tenant_id, payout.id)
            evidence = Evidence.of_result(result)
            applied = lifecycle.apply_evidence(
                connection, current, evidence, cause="bank_webhook", actor="processor", now_us=at(day, 15)
            )
            assert applied.reason == "applied", applied.reason
            return applied.item

        applied: Payout = self.run(work)
        return applied

    def settle(self, name: str, tenant_id: str, rail: str, amount_minor: int, day: str, fee_minor: int) -> Payout:
        """Scheduled the day before `day`, settled on `day` with the bank's fee."""
        before = (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()
        payout = self.send(self.schedule(name, tenant_id, rail, amount_minor, before), before)
        return self.bank(payout, day, "settled", fee_minor=fee_minor)

    def bank_return(self, payout: Payout, day: str, code: str, received_minor: int, fee_minor: int) -> Payout:
        return self.bank(
            payout,
            day,
            "returned",
            return_code=code,
            return_amount_minor=received_minor,
            return_fee_minor=fee_minor,
            returned_at_us=at(day, 14),
        )

    def adjust(self, name: str, kind: str, amount_minor: int, day: str, tenant_id: str = ACME) -> None:
        new = NewAdjustment(kind, amount_minor, effective_on=day)
        key = f"{kind}-{name}-{day}"
        self.run(
            lambda c: adjustments.record_from_api(
                c, tenant_id, self.ids[name], new, key=key, actor="local", now_us=at(day, 16)
            )
        )

    def cancel(self, name: str, day: str) -> None:
        payout = self.schedule(name, ACME, "ach", 7_000, day)
        self.run(lambda c: payouts.cancel(c, ACME, payout.id, actor="local", now_us=at(day, 11)))


def build(database: Database) -> dict[str, str]:
    """The whole fixture set (see the table above); returns the payout ids by name."""
    world = World(database)
    returned = world.settle("ach_returned", ACME, "ach", 10_000, "2026-01-06", fee_minor=25)
    world.bank_return(returned, "2026-01-07", "R02", received_minor=10_000, fee_minor=200)
    short = world.settle("sepa_short", ACME, "sepa", 50_000, "2026-01-13", fee_minor=20)
    world.bank_return(short, "2026-01-14", "AC04", received_minor=49_900, fee_minor=500)
    world.settle("charged_back", ACME, "ach", 20_000, "2026-01-20", fee_minor=25)
    world.adjust("charged_back", "chargeback", 20_000, "2026-01-26")
    world.adjust("charged_back", "recovery", 15_000, "2026-02-10")
    world.settle("fee_reversed", ACME, "ach", 8_000, "2026-01-27", fee_minor=25)
    world.adjust("fee_reversed", "fee_reversal", 25, "2026-02-03")
    world.settle("fee_only_1", ACME, "ach", 3_000, "2026-01-08", fee_minor=25)
    world.settle("fee_only_2", ACME, "ach", 4_000, "2026-01-09", fee_minor=25)
    world.settle("chargeback_won", ACME, "sepa", 30_000, "2026-02-02", fee_minor=0)
    world.adjust("chargeback_won", "chargeback", 30_000, "2026-02-05")
    world.adjust("chargeback_won", "chargeback_reversal", 30_000, "2026-02-20")
    refunded = world.settle("sepa_refund", ACME, "sepa", 40_000, "2026-01-21", fee_minor=20)
    world.bank_return(refunded, "2026-01-22", "MS03", received_minor=39_000, fee_minor=0)
    world.adjust("sepa_refund", "refund", 400, "2026-03-02")
    world.cancel("canceled", "2026-01-05")
    world.settle("no_fee", ACME, "ach", 6_000, "2026-01-06", fee_minor=0)
    world.settle("globex", GLOBEX, "ach", 10_000, "2026-01-15", fee_minor=25)
    world.adjust("globex", "chargeback", 1_000, "2026-01-20", tenant_id=GLOBEX)
    return world.ids
