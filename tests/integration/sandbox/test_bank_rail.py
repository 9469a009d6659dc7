"""The bank rail on SQLite and PostgreSQL: each test account's outcome at its time, fees,
batches, bounded steps and the webhooks each step queues. Time is moved by hand: the
sandbox's clock is set, and `settle_due` is called with explicit moments."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from paycore.processor.port import PayoutRequest
from paycore_sandbox import Sandbox, SandboxSettings
from paycore_sandbox.service import SandboxSchemaOutdated
from tests.integration.sandbox.bank_support import (
    CLOSE_MS,
    LATE_RETURN_MS,
    REJECT_MS,
    RETURN_MS,
    SETTLE_MS,
    ManualClock,
    ach,
    at_ms,
    count_rows,
    iban_ending,
    install_clock,
    payout_events,
    sepa,
)
from tests.integration.sandbox.conftest import SECRET, SETTINGS, RecordingSink

EVENT_KEYS = {
    "object",
    "request_id",
    "merchant_id",
    "status",
    "amount_minor",
    "currency",
    "rail",
    "bank_payout_id",
    "batch_id",
    "fee_minor",
    "failure_code",
    "return_code",
    "return_amount_minor",
    "return_fee_minor",
}


@dataclass
class Bank:
    sandbox: Sandbox
    clock: ManualClock


@pytest.fixture
def bank(sandbox_on_backend: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Bank:
    return Bank(sandbox_on_backend, install_clock(monkeypatch))


@dataclass(frozen=True)
class Case:
    request: PayoutRequest
    outcome: str  # rejected | settled | returned
    code: str | None = None
    late: bool = False
    return_amount_minor: int | None = None


CASES = [
    Case(ach("po_r03", "000111111113"), "rejected", "R03"),
    Case(ach("po_r04", "000111111116"), "rejected", "R04"),
    Case(ach("po_r01", "000222222227"), "returned", "R01", return_amount_minor=10_000),
    Case(ach("po_r02", "000333333335"), "returned", "R02", return_amount_minor=10_000),
    Case(ach("po_r10", "000444444440"), "returned", "R10", late=True, return_amount_minor=10_000),
    Case(ach("po_r29", "000555555553"), "returned", "R29", return_amount_minor=10_000),
    Case(ach("po_ach_ok", "000123456789"), "settled"),
    Case(sepa("po_ac01", iban_ending("0001")), "rejected", "AC01"),
    Case(sepa("po_ac04", iban_ending("0002")), "rejected", "AC04"),
    Case(sepa("po_ac04_return", iban_ending("0003")), "returned", "AC04", return_amount_minor=10_000 - 100),
    Case(sepa("po_md07", iban_ending("0004")), "returned", "MD07", return_amount_minor=10_000),
    Case(sepa("po_focr", iban_ending("0005")), "returned", "FOCR", late=True, return_amount_minor=10_000),
    Case(sepa("po_sepa_ok"), "settled"),
    Case(sepa("po_sepa_spaced", "DE89 3704 0044 0532 0130 00"), "settled"),
]


def status_at(bank: Bank, request_id: str, ms: int) -> str:
    bank.sandbox.settle_due(at_ms(ms))
    found = bank.sandbox.get_payout(request_id)
    assert found is not None
    return found.status


@pytest.mark.parametrize("case", CASES, ids=[case.request.request_id for case in CASES])
def test_each_test_account_reaches_its_outcome_at_its_time(bank: Bank, case: Case) -> None:
    accepted = bank.sandbox.send_payout(case.request)
    assert (accepted.status, accepted.fee_minor, accepted.batch_id is not None) == ("accepted", 0, True)
    assert accepted.bank_payout_id.startswith("bpo_") and accepted.batch_id and accepted.batch_id.startswith("bb_")

    assert status_at(bank, case.request.request_id, CLOSE_MS) == "accepted"  # the batch closes; nothing else yet
    assert status_at(bank, case.request.request_id, REJECT_MS - 1) == "accepted"
    first = "rejected" if case.outcome == "rejected" else "accepted"
    assert status_at(bank, case.request.request_id, REJECT_MS) == first
    assert status_at(bank, case.request.request_id, SETTLE_MS - 1) == first
    assert status_at(bank, case.request.request_id, SETTLE_MS) == ("rejected" if first == "rejected" else "settled")
    return_ms = LATE_RETURN_MS if case.late else RETURN_MS
    before_return = "rejected" if case.outcome == "rejected" else "settled"
    assert status_at(bank, case.request.request_id, return_ms - 1) == before_return
    assert status_at(bank, case.request.request_id, return_ms) == case.outcome
    assert bank.sandbox.settle_due(at_ms(return_ms + 3_600_000)) == 0, "nothing more ever happens"

    final = bank.sandbox.get_payout(case.request.request_id)
    assert final is not None and final.status == case.outcome
    assert final.bank_payout_id == accepted.bank_payout_id and final.batch_id == accepted.batch_id
    fee_minor, return_fee_minor = (25, 200) if case.request.rail == "ach" else (20, 500)
    if case.outcome == "rejected":
        assert (final.failure_code, final.fee_minor, final.return_fee_minor) == (case.code, 0, 0)
        assert (final.settled_at_us, final.returned_at_us, final.return_code) == (None, None, None)
    else:
        assert (final.failure_code, final.fee_minor, final.settled_at_us) == (None, fee_minor, at_ms(SETTLE_MS))
    if case.outcome == "returned":
        assert (final.return_code, final.return_amount_minor) == (case.code, case.return_amount_minor)
        assert (final.return_fee_minor, final.returned_at_us) == (return_fee_minor, at_ms(return_ms))
    if case.outcome == "settled":
        assert (final.return_code, final.return_amount_minor, final.return_fee_minor) == (None, None, 0)


def test_unknown_request_id_is_none(bank: Bank) -> None:
    assert bank.sandbox.get_payout("po_never_sent") is None


@pytest.mark.parametrize(("amount_minor", "returned_minor"), [(101, 1), (100, 100), (1, 1), (250_000, 249_900)])
def test_sepa_return_keeps_the_returning_banks_charges_only_from_a_larger_amount(
    bank: Bank, amount_minor: int, returned_minor: int
) -> None:
    bank.sandbox.send_payout(sepa("po_1", iban_ending("0003"), amount_minor=amount_minor))
    bank.sandbox.settle_due(at_ms(SETTLE_MS))
    bank.sandbox.settle_due(at_ms(RETURN_MS))

    found = bank.sandbox.get_payout("po_1")
    assert found is not None and found.status == "returned"
    assert found.return_amount_minor == returned_minor and type(found.return_amount_minor) is int


def test_webhooks_are_queued_per_step_with_increasing_sequence(bank: Bank) -> None:
    bank.sandbox.send_payout(ach("po_rejected", "000111111113"))
    bank.sandbox.send_payout(ach("po_returned", "000222222227"))
    assert payout_events(bank.sandbox) == [], "acceptance is the call's answer, not a webhook"

    bank.sandbox.settle_due(at_ms(SETTLE_MS))
    bank.sandbox.settle_due(at_ms(RETURN_MS))

    events = payout_events(bank.sandbox)
    assert [(event["type"], event["sequence"], event["data"]["request_id"]) for event in events] == [
        ("payout.rejected", 2, "po_rejected"),
        ("payout.settled", 2, "po_returned"),
        ("payout.returned", 3, "po_returned"),
    ]
    assert all(set(event["data"]) == EVENT_KEYS for event in events)
    rejected, settled, returned = (event["data"] for event in events)
    assert rejected == {
        "object": "payout",
        "request_id": "po_rejected",
        "merchant_id": "merchant_1",
        "status": "rejected",
        "amount_minor": 10_000,
        "currency": "USD",
        "rail": "ach",
        "bank_payout_id": rejected["bank_payout_id"],
        "batch_id": rejected["batch_id"],
        "fee_minor": 0,
        "failure_code": "R03",
        "return_code": None,
        "return_amount_minor": None,
        "return_fee_minor": 0,
    }
    assert (settled["status"], settled["fee_minor"], settled["return_code"]) == ("settled", 25, None)
    assert (returned["status"], returned["return_code"], returned["return_amount_minor"]) == ("returned", "R01", 10_000)
    assert (returned["fee_minor"], returned["return_fee_minor"]) == (25, 200)
    assert len({event["id"] for event in events}) == 3


def test_payouts_join_the_open_batch_of_their_rail_until_its_window_ends(bank: Bank) -> None:
    first = bank.sandbox.send_payout(ach("po_1"))
    bank.clock.at_ms(CLOSE_MS - 1)
    second = bank.sandbox.send_payout(ach("po_2", amount_minor=5))
    euro = bank.sandbox.send_payout(sepa("po_3"))
    bank.clock.at_ms(CLOSE_MS)
    third = bank.sandbox.send_payout(ach("po_4"))  # the window has ended, even if no closer ran yet

    assert first.batch_id == second.batch_id != euro.batch_id
    assert third.batch_id not in (first.batch_id, euro.batch_id)
    assert first.batch_id is not None
    batch = bank.sandbox.batch(first.batch_id)
    assert batch is not None
    assert (batch["status"], batch["count"], batch["total_minor"]) == ("closed", 2, 10_005)
    assert batch["closed_at"] == batch["closes_at"] == "2030-06-03T12:00:00.500000Z", "closed at the window's end"
    assert [payout["request_id"] for payout in batch["payouts"]] == ["po_1", "po_2"]
    assert count_rows(bank.sandbox, "batches") == 3


def test_a_full_batch_closes_at_once_and_its_steps_count_from_then(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = Sandbox.open(database_url, webhook_secret=SECRET, settings=SandboxSettings(bank_batch_max=3))
    clock = install_clock(monkeypatch)
    try:
        batch_ids = []
        for index in range(4):
            clock.at_ms(index * 10)
            batch_ids.append(sandbox.send_payout(ach(f"po_{index}")).batch_id)
        assert batch_ids[0] == batch_ids[1] == batch_ids[2] != batch_ids[3]
        assert batch_ids[0] is not None
        full = sandbox.batch(batch_ids[0])
        assert full is not None and (full["status"], full["closed_at"]) == ("closed", "2030-06-03T12:00:00.020000Z")

        request_ids = ["po_0", "po_1", "po_2", "po_3"]
        assert sandbox.settle_due(at_ms(20 + 1_000 - 1)) == 1, "only the fourth's batch closes, at 30 + 500 ms"
        assert sandbox.settle_due(at_ms(20 + 1_000)) == 3, "the full batch's three settle; the fourth waits"
        statuses = [found.status for found in map(sandbox.get_payout, request_ids) if found is not None]
        assert statuses == ["settled", "settled", "settled", "accepted"]
    finally:
        sandbox.close()


def test_steps_are_bounded_per_call(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = Sandbox.open(database_url, webhook_secret=SECRET, settings=SandboxSettings(bank_steps_max=2))
    install_clock(monkeypatch)
    try:
        for index in range(5):
            sandbox.send_payout(sepa(f"po_{index}"))
        counts = [sandbox.settle_due(at_ms(SETTLE_MS)) for _ in range(4)]
        assert counts == [1 + 2, 2, 1, 0], "one batch closed and two settled, then two, then the last"
        assert count_rows(sandbox, "webhooks") == 5
    finally:
        sandbox.close()


def test_a_sandbox_database_from_before_the_bank_rail_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE sandbox_webhooks (delivery_id TEXT PRIMARY KEY)"))
    engine.dispose()

    with pytest.raises(SandboxSchemaOutdated, match="delete it"):
        Sandbox.open(url, settings=SETTINGS)


@pytest.fixture
def fresh_sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    opened = Sandbox.open(f"sqlite:///{tmp_path / 'fresh.db'}", webhook_secret=SECRET, settings=SETTINGS)
    yield opened
    opened.close()


def test_the_background_loop_moves_payouts_on(fresh_sandbox: Sandbox) -> None:
    fast = SandboxSettings(
        bank_batch_window_ms=1, bank_reject_after_ms=0, bank_settle_after_ms=0, bank_return_after_ms=0
    )
    sandbox = Sandbox(fresh_sandbox.database, fast, SECRET)
    sandbox.send_payout(ach("po_1", "000222222227"))
    sink = RecordingSink()
    background = sandbox.start_background(sink, interval_ms=10)
    try:
        deadline = time.monotonic() + 5
        while len(sink.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        background.stop()

    assert [event["type"] for event in sink.events()] == ["payout.settled", "payout.returned"]
