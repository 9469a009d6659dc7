"""Authorizations (SPEC §6.1, docs/sandbox.md "Authorize now, capture later"), through both
transports: authorized with an expiry, captured once (all or part, the rest released),
canceled, expired; refusals store nothing; a request id is one effect."""

from __future__ import annotations

import time

import pytest

from paycore.kit import clock
from paycore.processor.port import ChargeRequest, ProcessorRefused, RefundRequest
from paycore_sandbox import Sandbox
from paycore_sandbox.limits import AUTHORIZATION_LIFETIME_MS, QUICK_AUTHORIZATION_LIFETIME_MS
from tests.integration.sandbox.authorization_support import (
    AMOUNT_MINOR,
    CURRENCY,
    MERCHANT,
    actions,
    authorization,
    authorize,
    cancel_of,
    capture_of,
    delivered_events,
    event_types,
)
from tests.integration.sandbox.conftest import Harness, RecordingSink, StartServer, count
from tests.integration.sandbox.test_http_api import call

SECOND_US = 1_000_000


@pytest.fixture
def harness(harness_on_backends: Harness) -> Harness:
    """Every test of this file through both transports on SQLite, and in process on PostgreSQL."""
    return harness_on_backends


def test_a_manual_charge_is_authorized_with_its_expiry_and_read_back(harness: Harness) -> None:
    before_us = clock.now_us()
    authorized = authorize(harness)

    assert authorized.capture == "manual"
    assert authorized.amount_capturable_minor == AMOUNT_MINOR
    assert (authorized.amount_captured_minor, authorized.amount_released_minor) == (0, 0)
    assert authorized.authorization_expires_at_us is not None
    lifetime_us = authorized.authorization_expires_at_us - before_us
    assert AUTHORIZATION_LIFETIME_MS * 1_000 <= lifetime_us < AUTHORIZATION_LIFETIME_MS * 1_000 + 60 * SECOND_US
    assert harness.processor.get_charge("pay_1") == authorized
    assert event_types(harness.sandbox) == ["charge.requires_capture"]


def test_an_automatic_charge_has_no_authorization_fields(harness: Harness) -> None:
    charged = harness.processor.charge(ChargeRequest("pay_1", MERCHANT, AMOUNT_MINOR, CURRENCY, "tok_ok"))

    assert (charged.status, charged.capture) == ("succeeded", "automatic")
    assert charged.amount_capturable_minor is None and charged.authorization_expires_at_us is None
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(charged, 1_000))
    assert refused.value.code == "charge_not_capturable"
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.cancel(cancel_of(charged))
    assert refused.value.code == "charge_not_cancelable"
    assert actions(harness.sandbox) == 0


def test_a_declined_authorization_holds_nothing(harness: Harness) -> None:
    declined = harness.processor.charge(
        ChargeRequest("pay_1", MERCHANT, AMOUNT_MINOR, CURRENCY, "tok_declined", capture="manual")
    )

    assert (declined.status, declined.failure_code) == ("failed", "card_declined")
    assert (declined.amount_capturable_minor, declined.amount_captured_minor) == (0, 0)
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(declined, 1_000))
    assert refused.value.code == "charge_not_capturable"


def test_a_partial_capture_releases_the_rest_and_a_second_capture_is_refused(harness: Harness) -> None:
    authorized = authorize(harness)

    captured = harness.processor.capture(capture_of(authorized, 3_000))

    assert captured.status == "captured"
    assert (captured.amount_captured_minor, captured.amount_released_minor) == (3_000, 2_000)
    assert captured.amount_capturable_minor == 0
    assert harness.processor.get_charge("pay_1") == captured
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(authorized, 1_000, request_id="cap_2"))
    assert refused.value.code == "charge_not_capturable" and "captured" in str(refused.value)
    assert actions(harness.sandbox) == 1
    assert event_types(harness.sandbox) == ["charge.requires_capture", "charge.captured"]


def test_a_full_capture_releases_nothing(harness: Harness) -> None:
    captured = harness.processor.capture(capture_of(authorize(harness), AMOUNT_MINOR))

    assert (captured.amount_captured_minor, captured.amount_released_minor) == (AMOUNT_MINOR, 0)


def test_capture_after_cancel_and_cancel_after_capture_are_refused(harness: Harness) -> None:
    first = authorize(harness, "pay_1")
    canceled = harness.processor.cancel(cancel_of(first))
    assert canceled.status == "canceled"
    assert (canceled.amount_released_minor, canceled.amount_captured_minor) == (AMOUNT_MINOR, 0)
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(first, 1_000))
    assert refused.value.code == "charge_not_capturable" and "canceled" in str(refused.value)

    second = authorize(harness, "pay_2")
    harness.processor.capture(capture_of(second, 1_000, request_id="cap_2"))
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.cancel(cancel_of(second, request_id="can_2"))
    assert refused.value.code == "charge_not_cancelable"
    assert harness.processor.get_charge("pay_2").status == "captured"  # type: ignore[union-attr]
    assert event_types(harness.sandbox, "pay_1") == ["charge.requires_capture", "charge.canceled"]


@pytest.mark.parametrize("amount_minor", [0, -1])
def test_a_capture_of_no_positive_amount_is_refused(harness: Harness, amount_minor: int) -> None:
    authorized = authorize(harness)

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(authorized, amount_minor))

    assert refused.value.code == "invalid_amount"
    assert harness.processor.get_charge("pay_1") == authorized and actions(harness.sandbox) == 0


def test_a_capture_above_the_authorized_amount_is_refused_and_stores_nothing(harness: Harness) -> None:
    authorized = authorize(harness)

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(authorized, AMOUNT_MINOR + 1))

    assert refused.value.code == "amount_too_large"
    assert harness.processor.get_charge("pay_1") == authorized and actions(harness.sandbox) == 0
    assert harness.processor.capture(capture_of(authorized, AMOUNT_MINOR)).status == "captured"


def test_a_capture_of_another_merchants_charge_is_not_found(harness: Harness) -> None:
    authorized = authorize(harness)
    other = capture_of(authorized, 1_000)

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(type(other)("cap_1", "merchant_2", other.payment_reference, 1_000, CURRENCY))

    assert refused.value.code == "charge_not_found"


def test_the_same_capture_twice_is_one_capture_and_other_parameters_are_refused(harness: Harness) -> None:
    authorized = authorize(harness)

    first = harness.processor.capture(capture_of(authorized, 3_000))
    assert harness.processor.capture(capture_of(authorized, 3_000)) == first
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(authorized, 2_000))
    assert refused.value.code == "request_id_reused"
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.cancel(cancel_of(authorized, request_id="cap_1"))  # a capture's id, for a cancel
    assert refused.value.code == "request_id_reused"

    assert actions(harness.sandbox) == 1
    assert event_types(harness.sandbox) == ["charge.requires_capture", "charge.captured"]


def test_the_same_cancel_twice_is_one_cancel(harness: Harness) -> None:
    authorized = authorize(harness)

    first = harness.processor.cancel(cancel_of(authorized))

    assert harness.processor.cancel(cancel_of(authorized)) == first
    assert actions(harness.sandbox) == 1
    assert event_types(harness.sandbox) == ["charge.requires_capture", "charge.canceled"]


def test_a_captured_authorization_is_refundable_up_to_the_captured_amount(harness: Harness) -> None:
    authorized = authorize(harness)
    reference = authorized.processor_charge_id
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.refund(RefundRequest("rf_0", MERCHANT, reference, 1_000, CURRENCY))
    assert refused.value.code == "charge_not_refundable"  # nothing is captured yet
    harness.processor.capture(capture_of(authorized, 3_000))

    assert harness.processor.refund(RefundRequest("rf_1", MERCHANT, reference, 2_000, CURRENCY)).status == "succeeded"
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.refund(RefundRequest("rf_2", MERCHANT, reference, 1_001, CURRENCY))
    assert refused.value.code == "over_refund"
    assert harness.processor.refund(RefundRequest("rf_3", MERCHANT, reference, 1_000, CURRENCY)).status == "succeeded"
    assert count(harness.sandbox, "refunds") == 2


def test_an_expired_authorization_is_refused_on_capture_and_read_as_expired_before_the_round(
    harness: Harness,
) -> None:
    quick = authorize(harness, "pay_1", "tok_expires_quickly")
    other = authorize(harness, "pay_2", "tok_expires_quickly")
    assert quick.authorization_expires_at_us is not None
    lifetime_us = quick.authorization_expires_at_us - clock.now_us()
    assert 0 < lifetime_us <= QUICK_AUTHORIZATION_LIFETIME_MS * 1_000

    time.sleep(lifetime_us / SECOND_US + 0.05)  # the round does not run here: the calls notice

    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(quick, 1_000))
    assert refused.value.code == "authorization_expired"
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(quick, 1_000, request_id="cap_2"))
    assert refused.value.code == "authorization_expired"
    expired = harness.processor.get_charge("pay_1")
    assert expired is not None and expired.status == "expired"
    assert (expired.amount_released_minor, expired.amount_captured_minor, expired.amount_capturable_minor) == (
        AMOUNT_MINOR,
        0,
        0,
    )
    read = harness.processor.get_charge("pay_2")  # a read expires it too
    assert read is not None and read.status == "expired"
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.cancel(cancel_of(other))
    assert refused.value.code == "authorization_expired"
    assert actions(harness.sandbox) == 0
    assert event_types(harness.sandbox, "pay_1") == ["charge.requires_capture", "charge.expired"]
    assert event_types(harness.sandbox, "pay_2") == ["charge.requires_capture", "charge.expired"]
    assert harness.sandbox.settle_due() == 0  # nothing left for the round


def test_the_background_round_expires_what_is_due(harness: Harness) -> None:
    authorize(harness, "pay_1", "tok_expires_quickly")
    authorize(harness, "pay_2")  # seven days

    assert harness.sandbox.settle_due(clock.now_us() + 3 * SECOND_US) == 1

    assert harness.processor.get_charge("pay_1").status == "expired"  # type: ignore[union-attr]
    assert harness.processor.get_charge("pay_2").status == "requires_capture"  # type: ignore[union-attr]
    assert event_types(harness.sandbox, "pay_1") == ["charge.requires_capture", "charge.expired"]
    assert harness.sandbox.settle_due(clock.now_us() + 3 * SECOND_US) == 0


def test_over_http_an_automatic_charge_answers_as_before_and_an_authorization_with_its_fields(
    sandbox: Sandbox, sink: RecordingSink, serve_sandbox: StartServer
) -> None:
    base_url = serve_sandbox(sandbox, sink)
    body = {"request_id": "pay_1", "merchant_id": MERCHANT, "amount_minor": 2_500, "currency": "USD", "token": "tok_ok"}

    status, automatic = call(base_url, "POST", "/v1/charges", body)
    assert status == 200 and set(automatic) == {
        "request_id",
        "status",
        "processor_charge_id",
        "amount_minor",
        "currency",
        "failure_code",
    }
    status, manual = call(base_url, "POST", "/v1/charges", {**body, "request_id": "pay_2", "capture": "manual"})
    assert status == 200 and manual["status"] == "requires_capture" and manual["capture"] == "manual"
    assert type(manual["authorization_expires_at_us"]) is int and manual["amount_capturable_minor"] == 2_500
    status, refused = call(base_url, "POST", "/v1/charges", {**body, "request_id": "pay_3", "capture": "later"})
    assert status == 400 and refused["error"] == "invalid_request"
    capture = {"request_id": "cap_1", "merchant_id": MERCHANT, "payment_reference": manual["processor_charge_id"]}
    status, refused = call(base_url, "POST", "/v1/captures", {**capture, "amount_minor": 2_501, "currency": "USD"})
    assert (status, refused["error"]) == (422, "amount_too_large")
    status, refused = call(base_url, "POST", "/v1/captures", {**capture, "amount_minor": 1.5, "currency": "USD"})
    assert (status, refused["error"]) == (400, "invalid_amount")
    assert call(base_url, "POST", "/v1/cancellations", {**capture, "request_id": "can_1"})[1]["status"] == "canceled"
    status, refused = call(base_url, "POST", "/v1/captures", {**capture, "amount_minor": 1, "currency": "USD"})
    assert (status, refused["error"]) == (409, "charge_not_capturable")


def test_a_pending_authorization_is_authorized_later_and_then_closes_at_sequence_three(harness: Harness) -> None:
    pending = harness.processor.charge(authorization("pay_1", "tok_pending"))
    assert (pending.status, pending.amount_capturable_minor) == ("pending", 0)
    with pytest.raises(ProcessorRefused) as refused:
        harness.processor.capture(capture_of(pending, 1_000))
    assert refused.value.code == "charge_not_capturable"

    assert harness.sandbox.settle_due(harness.later_us()) == 1
    authorized = harness.processor.get_charge("pay_1")
    assert authorized is not None and authorized.status == "requires_capture"
    assert authorized.amount_capturable_minor == AMOUNT_MINOR
    harness.processor.capture(capture_of(authorized, AMOUNT_MINOR))

    # (settled at a later moment than the capture's, so compared by sequence, not by time)
    sequences = {(event["type"], event["sequence"]) for event in delivered_events(harness)}
    assert sequences == {("charge.pending", 1), ("charge.requires_capture", 2), ("charge.captured", 3)}
    assert len(event_types(harness.sandbox)) == 3
