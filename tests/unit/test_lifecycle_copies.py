"""The lifecycle's two copies made on the money path without the standard library's general
ones: a moved item (`machine.replaced`, against `dataclasses.replace`) and a call's answer
(`calls._as_dict`, against `dataclasses.asdict`). Each gives what the general one gives, and
falls back to it where the type is not plain."""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from functools import cached_property
from typing import Any

from paycore.audit.rows import EventContext
from paycore.idempotency.service import KeyScope
from paycore.kit import actors
from paycore.lifecycle.calls import _as_dict
from paycore.lifecycle.machine import _stores_only, replaced
from paycore.payments.accept_plan import NewIds, plan_accept
from paycore.payments.types import NewPayment, Payment
from paycore.processor.port import ChargeRequest, ChargeResult, PayoutResult, RefundResult, charge_request_fields


def _payment() -> Payment:
    plan = plan_accept(
        KeyScope("acme", "key-1", "f" * 64, now_us=1_700_000_000_000_000, expires_at_us=None),
        NewPayment(1_250, "USD", "card", "tok_ok", "acct_dest", "a note", {"order": "7"}, actors.LOCAL),
        processing_stale_ms=60_000,
        clearing_account_id="acct_clearing",
        context=EventContext(None, None),
        new_ids=NewIds("pay_1", "txn_hold", "acct_new", "ent_hd", "ent_hc", "evt_birth"),
    )
    assert plan is not None
    return plan.payment


def test_a_moved_payment_is_what_dataclasses_replace_makes() -> None:
    payment = _payment()
    changes: dict[str, Any] = {
        "status": "succeeded",
        "updated_at_us": payment.updated_at_us + 1,
        "failure_code": None,
        "other": 1,
    }
    moved = replaced(payment, changes)
    expected = dataclasses.replace(payment, **{name: value for name, value in changes.items() if name != "other"})
    assert _stores_only(Payment)
    assert type(moved) is Payment and moved == expected and moved is not payment
    assert vars(moved) == vars(expected) and list(vars(moved)) == list(vars(expected))
    assert payment.status == "processing", "the item itself is left as it was"
    assert moved.metadata is payment.metadata, "a shallow copy, as dataclasses.replace makes"


@dataclass(frozen=True)
class _Checked:
    status: str
    updated_at_us: int
    tenant_id: str = "acme"
    id: str = "item_1"

    def __post_init__(self) -> None:
        assert self.status != "refused", "built again: its check runs"


@dataclass(frozen=True)
class _WithInitVar:
    status: str
    seed: InitVar[int] = 0


@dataclass(frozen=True)
class _Derived:
    status: str
    computed: int = field(init=False, default=0)


@dataclass
class _Cached:
    status: str
    updated_at_us: int = 1
    tenant_id: str = "acme"
    id: str = "item_1"

    @cached_property
    def shouted(self) -> str:
        return self.status.upper()


def test_a_type_that_does_more_than_store_its_fields_is_built_again() -> None:
    for kind in (_Checked, _WithInitVar, _Derived, _Cached):
        assert not _stores_only(kind), kind
    try:
        replaced(_Checked("open", 1), {"status": "refused"})
    except AssertionError as error:
        assert "built again" in str(error)
    else:
        raise AssertionError("the copy skipped the type's own check")
    cached = _Cached("open")
    assert cached.shouted == "OPEN"
    assert replaced(cached, {"status": "done"}).shouted == "DONE", "no cached value carried over"


@dataclass(frozen=True)
class _Nested:
    amounts: list[int]
    note: dict[str, Any]


def test_a_result_reads_as_dataclasses_asdict_reads_it() -> None:
    results: list[Any] = [
        ChargeResult("pay_1", "succeeded", "ch_1", 1_250, "USD"),
        ChargeResult("pay_1", "failed", "ch_1", 1_250, "USD", "card_declined", "manual", 0, 0, 0, 1_700),
        RefundResult("rf_1", "succeeded", "re_1", 10, "EUR"),
        PayoutResult("po_1", "accepted", "bp_1", 500, "USD", "ach"),
    ]
    for result in results:
        found = _as_dict(result)
        assert found == dataclasses.asdict(result) and list(found) == list(dataclasses.asdict(result))


def test_a_result_with_containers_is_copied_deep() -> None:
    nested = _Nested([1, 2], {"a": [3]})
    found = _as_dict(nested)
    assert found == dataclasses.asdict(nested)
    assert found["amounts"] is not nested.amounts and found["note"]["a"] is not nested.note["a"]


def test_a_charge_request_is_sent_and_recorded_as_dataclasses_asdict_reads_it() -> None:
    automatic = ChargeRequest("pay_1", "acme", 1_250, "USD", "tok_ok", "a note")
    manual = ChargeRequest("pay_2", "acme", 1_250, "USD", "tok_ok", None, "manual")
    expected = dataclasses.asdict(automatic)
    del expected["capture"]  # left out when automatic: the request as it was before authorizations
    assert charge_request_fields(automatic) == expected and list(charge_request_fields(automatic)) == list(expected)
    assert charge_request_fields(manual) == dataclasses.asdict(manual)
