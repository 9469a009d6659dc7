"""SPEC §7.2 (contract): `paycore.refunds.handle(charges, requests)`, rule by rule, refusals in
their order, the bad inputs that raise, and a model of the contract that random request
sequences must agree with. `handle` builds its own in-memory SQLite database per call, so
these tests need no `backend`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paycore.refunds import handle
from paycore.refunds.replay import AT_MAX

AMOUNT_MAX = 2**53 - 1
CHARGES = [{"id": "ch_a", "amount": 1000}, {"id": "ch_b", "amount": 250}]


def refund(charge: Any, amount: Any, **at: Any) -> dict[str, Any]:
    return {"op": "refund", "charge": charge, "amount": amount, **at}


def created(refund_id: str, charge: str, amount: int, created_at: int = 0, status: str = "pending") -> dict[str, Any]:
    body = {"id": refund_id, "charge": charge, "amount": amount, "status": status, "created_at": created_at}
    return {"status": 201 if status == "pending" else 200, "refund": body}


def error(status: int, code: str) -> dict[str, Any]:
    return {"status": status, "error": code}


def summary(charge: str, amount: int, pending: int = 0, settled: int = 0, failed: int = 0) -> dict[str, Any]:
    numbers = {"amount": amount, "pending": pending, "settled": settled, "failed": failed}
    return {"status": 200, "summary": {"charge": charge, **numbers, "refundable": amount - pending - settled}}


# ---------------------------------------------------------------------------- refunds


def test_refunds_are_pending_with_dense_ids_in_creation_order_and_their_time() -> None:
    assert handle(
        CHARGES,
        [refund("ch_a", 100, at=1_700_000_000), refund("ch_b", 250, at=0), refund("ch_a", 1)],
    ) == [created("rf_1", "ch_a", 100, 1_700_000_000), created("rf_2", "ch_b", 250, 0), created("rf_3", "ch_a", 1, 0)]


def test_responses_carry_exactly_the_fields_of_the_contract_in_its_order() -> None:
    made, settled, summed, refused = handle(
        CHARGES,
        [refund("ch_a", 5), {"op": "settle", "refund": "rf_1"}, {"op": "summary", "charge": "ch_a"}, refund("x", 1)],
    )
    assert list(made) == ["status", "refund"] and list(settled) == ["status", "refund"]
    assert list(made["refund"]) == list(settled["refund"]) == ["id", "charge", "amount", "status", "created_at"]
    assert list(summed) == ["status", "summary"]
    assert list(summed["summary"]) == ["charge", "amount", "pending", "settled", "failed", "refundable"]
    assert list(refused) == ["status", "error"]
    numbers = [made["refund"]["amount"], made["refund"]["created_at"], *list(summed["summary"].values())[1:]]
    assert all(type(number) is int for number in numbers), numbers


def test_an_empty_replay_answers_nothing_and_charges_may_be_empty() -> None:
    assert handle(CHARGES, []) == []
    assert handle([], [refund("ch_a", 1), {"op": "summary", "charge": "ch_a"}]) == [
        error(404, "charge_not_found"),
        error(404, "charge_not_found"),
    ]


def test_a_refund_may_take_the_whole_charge_and_not_one_cent_more() -> None:
    charges = [{"id": "big", "amount": AMOUNT_MAX}, {"id": "small", "amount": 5}]
    assert handle(charges, [refund("big", AMOUNT_MAX), refund("big", 1), refund("small", 6), refund("small", 5)]) == [
        created("rf_1", "big", AMOUNT_MAX),
        error(422, "over_refund"),
        error(422, "over_refund"),
        created("rf_2", "small", 5),
    ]


@pytest.mark.parametrize("amount", [0, -1, True, False, 1.0, 10.5, "5", None, [5], AMOUNT_MAX + 1])
def test_an_amount_that_is_not_a_positive_integer_is_invalid(amount: Any) -> None:
    assert handle(CHARGES, [refund("ch_a", amount)]) == [error(400, "invalid_amount")]


def test_a_missing_amount_is_invalid() -> None:
    assert handle(CHARGES, [{"op": "refund", "charge": "ch_a", "at": 3}]) == [error(400, "invalid_amount")]


@pytest.mark.parametrize("at", [-1, True, False, 1.0, "3", None, [1], AT_MAX + 1])
def test_an_at_that_is_not_a_non_negative_integer_is_invalid(at: Any) -> None:
    assert handle(CHARGES, [refund("ch_a", 10, at=at)]) == [error(400, "invalid_time")]


def test_the_largest_at_that_fits_is_kept_exactly() -> None:
    assert handle(CHARGES, [refund("ch_a", 10, at=AT_MAX), {"op": "settle", "refund": "rf_1"}]) == [
        created("rf_1", "ch_a", 10, AT_MAX),
        created("rf_1", "ch_a", 10, AT_MAX, status="settled"),
    ]


@pytest.mark.parametrize("charge", ["ch_zz", "", "CH_A", "x" * 65, None, 7, ["ch_a"]])
def test_an_unknown_or_malformed_charge_is_not_found(charge: Any) -> None:
    assert handle(CHARGES, [refund(charge, 10)]) == [error(404, "charge_not_found")]


def test_a_missing_charge_is_not_found() -> None:
    assert handle(CHARGES, [{"op": "refund", "amount": 10}]) == [error(404, "charge_not_found")]


def test_refusals_are_checked_in_the_order_of_the_spec() -> None:
    assert handle(
        CHARGES,
        [
            refund("ch_zz", 0, at=-1),  # every check fails: the amount is reported
            refund("ch_a", True, at=-1),
            refund("ch_a", 5000, at="late"),  # over the charge, but the time comes first
            refund("ch_zz", 10, at=-1),  # unknown charge and bad time: the time
            refund("ch_zz", 5000),  # unknown charge, an amount over any charge: not found
            refund("ch_a", 5000, at=1),  # only too much
        ],
    ) == [
        error(400, "invalid_amount"),
        error(400, "invalid_amount"),
        error(400, "invalid_time"),
        error(400, "invalid_time"),
        error(404, "charge_not_found"),
        error(422, "over_refund"),
    ]


def test_a_refused_refund_uses_no_id_and_stores_nothing() -> None:
    assert handle(
        CHARGES,
        [
            refund("ch_a", 600),
            refund("ch_a", 401),  # over
            refund("ch_a", -5),  # invalid amount
            refund("ch_a", 5, at=-5),  # invalid time
            refund("nope", 5),  # unknown charge
            {"op": "summary", "charge": "ch_a"},
            refund("ch_a", 400),
            {"op": "settle", "refund": "rf_3"},
        ],
    ) == [
        created("rf_1", "ch_a", 600),
        error(422, "over_refund"),
        error(400, "invalid_amount"),
        error(400, "invalid_time"),
        error(404, "charge_not_found"),
        summary("ch_a", 1000, pending=600),
        created("rf_2", "ch_a", 400),
        error(404, "refund_not_found"),
    ]


def test_pending_and_settled_refunds_count_and_failed_ones_release_their_amount() -> None:
    assert handle(
        CHARGES,
        [
            refund("ch_a", 700, at=10),
            refund("ch_a", 400, at=11),  # 700 pending + 400 > 1000
            {"op": "fail", "refund": "rf_1"},
            refund("ch_a", 400, at=12),  # fits only because rf_1 failed
            {"op": "settle", "refund": "rf_2"},
            refund("ch_a", 601, at=13),  # 400 settled + 601 > 1000
            refund("ch_a", 600, at=14),
            {"op": "summary", "charge": "ch_a"},
            {"op": "summary", "charge": "ch_b"},
        ],
    ) == [
        created("rf_1", "ch_a", 700, 10),
        error(422, "over_refund"),
        created("rf_1", "ch_a", 700, 10, status="failed"),
        created("rf_2", "ch_a", 400, 12),
        created("rf_2", "ch_a", 400, 12, status="settled"),
        error(422, "over_refund"),
        created("rf_3", "ch_a", 600, 14),
        summary("ch_a", 1000, pending=600, settled=400, failed=700),
        summary("ch_b", 250),
    ]


def test_refunds_of_one_charge_never_count_against_another() -> None:
    assert handle(CHARGES, [refund("ch_b", 250), refund("ch_a", 1000), refund("ch_b", 1)]) == [
        created("rf_1", "ch_b", 250),
        created("rf_2", "ch_a", 1000),
        error(422, "over_refund"),
    ]


# ---------------------------------------------------------------------------- settle and fail


def test_settle_and_fail_answer_the_refund_with_its_creation_time() -> None:
    assert handle(
        CHARGES,
        [
            refund("ch_a", 10, at=50),
            refund("ch_a", 20),
            {"op": "settle", "refund": "rf_1", "at": 99},
            {"op": "fail", "refund": "rf_2"},
        ],
    ) == [
        created("rf_1", "ch_a", 10, 50),
        created("rf_2", "ch_a", 20, 0),
        created("rf_1", "ch_a", 10, 50, status="settled"),
        created("rf_2", "ch_a", 20, 0, status="failed"),
    ]


@pytest.mark.parametrize("first", ["settle", "fail"])
@pytest.mark.parametrize("second", ["settle", "fail"])
def test_a_refund_that_is_no_longer_pending_cannot_be_settled_or_failed(first: str, second: str) -> None:
    answers = handle(CHARGES, [refund("ch_a", 10), {"op": first, "refund": "rf_1"}, {"op": second, "refund": "rf_1"}])
    assert answers[1]["status"] == 200
    assert answers[2] == error(409, "not_pending")


@pytest.mark.parametrize("refund_id", ["rf_2", "rf_0", "RF_1", "", None, 1, ["rf_1"]])
@pytest.mark.parametrize("op", ["settle", "fail"])
def test_settling_or_failing_an_unknown_refund_is_not_found(op: str, refund_id: Any) -> None:
    assert handle(CHARGES, [refund("ch_a", 10), {"op": op, "refund": refund_id}])[1] == error(404, "refund_not_found")


@pytest.mark.parametrize("op", ["settle", "fail"])
def test_settling_or_failing_without_a_refund_is_not_found(op: str) -> None:
    assert handle(CHARGES, [{"op": op}]) == [error(404, "refund_not_found")]


def test_a_refused_refund_cannot_be_settled() -> None:
    assert handle(CHARGES, [refund("ch_b", 300), {"op": "settle", "refund": "rf_1"}]) == [
        error(422, "over_refund"),
        error(404, "refund_not_found"),
    ]


# ---------------------------------------------------------------------------- summary


@pytest.mark.parametrize("charge", ["ch_zz", "", None, 3])
def test_the_summary_of_an_unknown_charge_is_not_found(charge: Any) -> None:
    assert handle(CHARGES, [{"op": "summary", "charge": charge}]) == [error(404, "charge_not_found")]
    assert handle(CHARGES, [{"op": "summary"}]) == [error(404, "charge_not_found")]


def test_the_summary_totals_refunds_by_status() -> None:
    assert handle(
        CHARGES,
        [
            {"op": "summary", "charge": "ch_a"},
            refund("ch_a", 100),
            refund("ch_a", 200),
            refund("ch_a", 300),
            refund("ch_a", 50),
            {"op": "settle", "refund": "rf_1"},
            {"op": "fail", "refund": "rf_2"},
            {"op": "summary", "charge": "ch_a"},
        ],
    )[::7] == [summary("ch_a", 1000), summary("ch_a", 1000, pending=350, settled=100, failed=200)]


# ---------------------------------------------------------------------------- bad input raises

BAD_CHARGES: list[Any] = [
    None,
    "ch_a",
    {"id": "ch_a", "amount": 10},
    [None],
    ["ch_a"],
    [("ch_a", 10)],
    [{"id": "ch_a"}],
    [{"amount": 10}],
    [{"id": "ch_a", "amount": True}],
    [{"id": "ch_a", "amount": 0}],
    [{"id": "ch_a", "amount": -10}],
    [{"id": "ch_a", "amount": 10.0}],
    [{"id": "ch_a", "amount": "10"}],
    [{"id": "ch_a", "amount": AMOUNT_MAX + 1}],
    [{"id": 7, "amount": 10}],
    [{"id": None, "amount": 10}],
    [{"id": "", "amount": 10}],
    [{"id": "x" * 65, "amount": 10}],
    [{"id": "ch_a", "amount": 10}, {"id": "ch_a", "amount": 20}],
]


@pytest.mark.parametrize("charges", BAD_CHARGES)
def test_a_bad_charge_raises_value_error_naming_the_charge(charges: Any) -> None:
    with pytest.raises(ValueError, match="charge"):
        handle(charges, [])


def test_charges_may_carry_other_keys_and_the_longest_id() -> None:
    charges = [{"id": "x" * 64, "amount": 10, "currency": "usd"}]
    assert handle(charges, [refund("x" * 64, 10)]) == [created("rf_1", "x" * 64, 10)]


BAD_REQUESTS: list[Any] = [
    None,
    {"op": "refund", "charge": "ch_a", "amount": 1},
    [None],
    ["refund"],
    [["op", "refund"]],
    [{}],
    [{"charge": "ch_a", "amount": 10}],
    [{"op": None}],
    [{"op": "Refund", "charge": "ch_a", "amount": 10}],
    [{"op": "cancel", "refund": "rf_1"}],
    [{"op": "approve", "refund": "rf_1"}],
    [{"op": ["refund"]}],
    [refund("ch_a", 10), {"op": "delete"}],  # checked before anything is replayed
]


@pytest.mark.parametrize("requests", BAD_REQUESTS)
def test_a_bad_request_raises_value_error_naming_the_op(requests: Any) -> None:
    with pytest.raises(ValueError, match="op"):
        handle(CHARGES, requests)


def test_two_calls_share_nothing() -> None:
    first = handle([{"id": "only_first", "amount": 100}], [refund("only_first", 100)])
    second = handle(
        [{"id": "only_second", "amount": 100}],
        [refund("only_first", 1), refund("only_second", 100), {"op": "settle", "refund": "rf_2"}],
    )
    assert first == [created("rf_1", "only_first", 100)]
    assert second == [
        error(404, "charge_not_found"),
        created("rf_1", "only_second", 100),
        error(404, "refund_not_found"),
    ]
    # The same input, the same answers: nothing of the first call survives into the next.
    assert handle([{"id": "only_first", "amount": 100}], [refund("only_first", 100)]) == first


def test_calls_from_several_threads_at_once_share_nothing() -> None:
    """Regression: each call migrates its own database, and Alembic's running context is a
    module global; two migrations at once in one process crashed the interpreter."""

    def one(number: int) -> list[dict[str, Any]]:
        return handle([{"id": "c", "amount": 10}], [refund("c", number % 10 + 1, at=number), refund("c", 10)])

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(one, range(36), timeout=120))
    for number, answer in enumerate(answers):
        assert answer == [created("rf_1", "c", number % 10 + 1, number), error(422, "over_refund")]


# ---------------------------------------------------------------------------- a model of the contract


@dataclass
class Model:
    """§7.2 in a few lines of plain Python; `handle` must give the same answers."""

    amounts: dict[str, int]
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        if request["op"] == "refund":
            return self.refund(request)
        if request["op"] == "summary":
            return self.summary(request.get("charge"))
        found = self.refunds.get(request.get("refund"))  # type: ignore[arg-type]
        if found is None:
            return error(404, "refund_not_found")
        if found["status"] != "pending":
            return error(409, "not_pending")
        found["status"] = "settled" if request["op"] == "settle" else "failed"
        return {"status": 200, "refund": dict(found)}

    def refund(self, request: dict[str, Any]) -> dict[str, Any]:
        amount, at, charge = request.get("amount"), request.get("at", 0), request.get("charge")
        if type(amount) is not int or amount <= 0:
            return error(400, "invalid_amount")
        if type(at) is not int or at < 0:
            return error(400, "invalid_time")
        if charge not in self.amounts:
            return error(404, "charge_not_found")
        if self.held(charge) + amount > self.amounts[charge]:
            return error(422, "over_refund")
        refund_id = f"rf_{len(self.refunds) + 1}"
        self.refunds[refund_id] = {"id": refund_id, "charge": charge, "amount": amount, "status": "pending"}
        self.refunds[refund_id]["created_at"] = at
        return {"status": 201, "refund": dict(self.refunds[refund_id])}

    def held(self, charge: str) -> int:
        return sum(r["amount"] for r in self.refunds.values() if r["charge"] == charge and r["status"] != "failed")

    def summary(self, charge: Any) -> dict[str, Any]:
        if charge not in self.amounts:
            return error(404, "charge_not_found")
        totals = {"pending": 0, "settled": 0, "failed": 0}
        for found in self.refunds.values():
            if found["charge"] == charge:
                totals[found["status"]] += found["amount"]
        return summary(charge, self.amounts[charge], **totals)


CHARGE_IDS = ["a", "b", "c"]
charge_lists = st.lists(
    st.tuples(st.sampled_from(CHARGE_IDS), st.integers(1, 100)), max_size=3, unique_by=lambda pair: pair[0]
).map(lambda pairs: [{"id": charge_id, "amount": amount} for charge_id, amount in pairs])
some_charge = st.sampled_from([*CHARGE_IDS, "zz"])
requests = st.lists(
    st.one_of(
        st.builds(
            lambda charge, amount, at: {"op": "refund", "charge": charge, "amount": amount, **at},
            some_charge,
            st.one_of(st.integers(-5, 120), st.booleans()),
            st.one_of(st.just({}), st.fixed_dictionaries({"at": st.one_of(st.integers(-2, 1000), st.booleans())})),
        ),
        st.builds(
            lambda op, number: {"op": op, "refund": f"rf_{number}"},
            st.sampled_from(["settle", "fail"]),
            st.integers(1, 8),
        ),
        st.builds(lambda charge: {"op": "summary", "charge": charge}, some_charge),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(charges=charge_lists, requests=requests)
def test_handle_answers_as_the_model_of_the_contract(charges: list[dict[str, Any]], requests: list[Any]) -> None:
    model = Model({charge["id"]: charge["amount"] for charge in charges})
    assert handle(charges, requests) == [model.answer(request) for request in requests]
