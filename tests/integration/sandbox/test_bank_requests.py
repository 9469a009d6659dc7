"""Payout requests through both transports: a request id is one payout (repeats answer the
stored result, other parameters are refused, concurrent duplicates make one row), and bad
input is refused with a clear code before anything is stored."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import Connection

from paycore.processor.port import PayoutRequest, ProcessorRefused
from paycore_sandbox import Sandbox, bank_repository
from tests.integration.sandbox.bank_support import (
    CLOSE_MS,
    SETTLE_MS,
    ach,
    at_ms,
    count_rows,
    iban_ending,
    install_clock,
    sepa,
)
from tests.integration.sandbox.conftest import Harness
from tests.integration.sandbox.test_dedupe import THREADS, all_at_once


def test_the_same_payout_twice_is_one_payout(harness: Harness) -> None:
    first = harness.processor.send_payout(ach("po_1"))

    assert harness.processor.send_payout(ach("po_1")) == first
    assert harness.processor.get_payout("po_1") == first
    assert count_rows(harness.sandbox, "payouts") == 1


def test_a_repeat_answers_the_current_state(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    install_clock(monkeypatch)
    accepted = harness.processor.send_payout(sepa("po_1"))
    harness.sandbox.settle_due(at_ms(SETTLE_MS))

    repeated = harness.processor.send_payout(sepa("po_1"))

    assert (repeated.status, repeated.fee_minor, repeated.bank_payout_id) == ("settled", 20, accepted.bank_payout_id)
    assert repeated.settled_at_us == at_ms(SETTLE_MS)
    assert count_rows(harness.sandbox, "payouts") == 1


@pytest.mark.parametrize(
    "changed",
    [
        {"amount_minor": 10_001},
        {"merchant_id": "merchant_2"},
        {"beneficiary_name": "John Doe"},
        {"account_number": "000123456780"},
        {"routing_number": "021000021"},
    ],
    ids=lambda changed: next(iter(changed)),
)
def test_the_same_request_id_with_other_parameters_is_refused(harness: Harness, changed: dict[str, Any]) -> None:
    original = harness.processor.send_payout(ach("po_1"))

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.send_payout(ach("po_1", **changed))

    assert refused.value.code == "request_id_reused"
    assert harness.processor.get_payout("po_1") == original
    assert count_rows(harness.sandbox, "payouts") == 1


def test_another_rail_under_the_same_request_id_is_refused(harness: Harness) -> None:
    harness.processor.send_payout(ach("po_1"))

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.send_payout(sepa("po_1"))

    assert refused.value.code == "request_id_reused"


def test_concurrent_identical_sends_through_a_transport_make_one_payout(harness: Harness) -> None:
    results = all_at_once(lambda _: harness.processor.send_payout(sepa("po_1")))

    assert not [result for result in results if isinstance(result, BaseException)]
    assert len({result for result in results if not isinstance(result, BaseException)}) == 1
    assert count_rows(harness.sandbox, "payouts") == 1


def test_concurrent_identical_sends_make_one_payout_on_each_backend(sandbox_on_backend: Sandbox) -> None:
    results = all_at_once(lambda _: sandbox_on_backend.send_payout(ach("po_1")))

    assert not [result for result in results if isinstance(result, BaseException)]
    assert len({result for result in results if not isinstance(result, BaseException)}) == 1
    assert count_rows(sandbox_on_backend, "payouts") == 1
    assert count_rows(sandbox_on_backend, "batches") == 1


def test_concurrent_payouts_share_one_batch_and_its_total_on_each_backend(sandbox_on_backend: Sandbox) -> None:
    results = all_at_once(lambda index: sandbox_on_backend.send_payout(ach(f"po_{index}", amount_minor=index + 1)))

    assert not [result for result in results if isinstance(result, BaseException)]
    batch_ids = {result.batch_id for result in results if not isinstance(result, BaseException)}
    assert len(batch_ids) == 1, "one open batch per rail and currency, even when they all arrive at once"
    (batch_id,) = batch_ids
    assert batch_id is not None
    batch = sandbox_on_backend.batch(batch_id)
    assert batch is not None
    assert (batch["count"], batch["total_minor"]) == (THREADS, sum(range(1, THREADS + 1)))
    assert len(batch["payouts"]) == THREADS


TOO_LONG_NAME = "x" * 141
INVALID = [
    ("amount_zero", ach("po_x", amount_minor=0), "invalid_amount"),
    ("amount_negative", ach("po_x", amount_minor=-5), "invalid_amount"),
    ("amount_past_2_53", ach("po_x", amount_minor=2**53), "invalid_amount"),
    ("ach_amount_past_nacha", ach("po_x", amount_minor=10_000_000_000), "invalid_amount"),
    ("sepa_amount_past_scheme", sepa("po_x", amount_minor=100_000_000_000), "invalid_amount"),
    ("unknown_currency", ach("po_x", currency="XXX"), "invalid_currency"),
    ("ach_in_euros", ach("po_x", currency="EUR"), "invalid_currency"),
    ("sepa_in_dollars", sepa("po_x", currency="USD"), "invalid_currency"),
    ("unknown_rail", ach("po_x", rail="wire"), "invalid_request"),
    ("empty_name", ach("po_x", beneficiary_name=""), "invalid_request"),
    ("long_name", ach("po_x", beneficiary_name=TOO_LONG_NAME), "invalid_request"),
    ("name_with_newline", ach("po_x", beneficiary_name="Jane\nDoe"), "invalid_request"),
    ("empty_request_id", ach(""), "invalid_request"),
    ("routing_check_digit", ach("po_x", routing_number="110000001"), "invalid_account"),
    ("routing_eight_digits", ach("po_x", routing_number="11000000"), "invalid_account"),
    ("routing_letters", ach("po_x", routing_number="11000000A"), "invalid_account"),
    ("account_three_digits", ach("po_x", account_number="123"), "invalid_account"),
    ("account_eighteen_digits", ach("po_x", account_number="1" * 18), "invalid_account"),
    ("account_letters", ach("po_x", account_number="12345A"), "invalid_account"),
    ("ach_without_account", ach("po_x", account_number=None), "invalid_account"),
    ("ach_with_iban", ach("po_x", iban="DE89370400440532013000"), "invalid_request"),
    ("iban_checksum", sepa("po_x", iban="DE89370400440532013001"), "invalid_account"),
    ("iban_garbage", sepa("po_x", iban="not an iban"), "invalid_account"),
    ("iban_outside_sepa", sepa("po_x", iban="BR1800360305000010009795493C1"), "invalid_account"),
    ("sepa_without_iban", sepa("po_x", iban=None), "invalid_account"),
    ("sepa_with_routing", sepa("po_x", routing_number="110000000"), "invalid_request"),
    ("bic_invalid", sepa("po_x", bic="12345678"), "invalid_account"),
]


@pytest.mark.parametrize(("request_", "code"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID])
def test_invalid_payouts_are_refused_and_store_nothing(harness: Harness, request_: PayoutRequest, code: str) -> None:
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.send_payout(request_)

    assert refused.value.code == code
    assert str(refused.value)
    assert count_rows(harness.sandbox, "payouts") == 0
    assert count_rows(harness.sandbox, "batches") == 0


def test_a_valid_bic_and_a_spaced_iban_are_accepted(harness: Harness) -> None:
    request = sepa("po_1", "DE89 3704 0044 0532 0130 00", bic="COBADEFFXXX")

    assert harness.processor.send_payout(request).status == "accepted"
    assert harness.processor.send_payout(dataclasses.replace(request)).status == "accepted"


def test_the_test_ibans_are_valid(harness: Harness) -> None:
    for index, ending in enumerate(["0001", "0002", "0003", "0004", "0005"]):
        assert harness.processor.send_payout(sepa(f"po_{index}", iban_ending(ending))).status == "accepted"


def test_a_duplicate_committed_meanwhile_is_answered_and_leaves_no_empty_batch(
    sandbox_on_backend: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = install_clock(monkeypatch)
    first = sandbox_on_backend.send_payout(ach("po_1"))
    clock.at_ms(CLOSE_MS)  # the batch's window has ended: the next payout opens another batch
    read = bank_repository.find_payout
    reads: list[str] = []

    def blind_at_first(connection: Connection, request_id: str) -> Mapping[str, Any] | None:
        """The first look misses the row, as if its transaction committed just after."""
        reads.append(request_id)
        return None if len(reads) == 1 else read(connection, request_id)

    monkeypatch.setattr(bank_repository, "find_payout", blind_at_first)
    assert sandbox_on_backend.send_payout(ach("po_1")) == first
    reads.clear()
    with pytest.raises(ProcessorRefused) as refused:
        sandbox_on_backend.send_payout(ach("po_1", amount_minor=1))

    assert refused.value.code == "request_id_reused"
    assert count_rows(sandbox_on_backend, "batches") == 1, "the batch opened for the duplicate was rolled back"
    assert count_rows(sandbox_on_backend, "payouts") == 1
