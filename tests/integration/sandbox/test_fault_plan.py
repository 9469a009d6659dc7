"""The fault plan alone: strict validation, reproducible decisions, next_n counting."""

from __future__ import annotations

from typing import Any

import pytest

from paycore_sandbox import FaultPlanError, SandboxSettings
from paycore_sandbox.faults import FaultInjector, Op


def injector(plan: dict[str, Any]) -> FaultInjector:
    made = FaultInjector(SandboxSettings())
    made.set_plan(plan)
    return made


def test_the_same_seed_makes_the_same_decisions() -> None:
    plan = {
        "seed": 42,
        "rules": [
            {"fault": "drop_response", "percent": 30, "ops": ["charge"]},
            {"fault": "duplicate_webhook", "percent": 50},
            {"fault": "delay_ms", "delay_ms": 1500, "percent": 20},
        ],
    }
    ops: list[Op] = ["charge", "refund", "get_charge"] * 30

    one, two, other = injector(plan), injector(plan), injector({**plan, "seed": 43})
    run_one = [one.decide(op) for op in ops]
    run_two = [two.decide(op) for op in ops]
    run_other = [other.decide(op) for op in ops]

    assert run_one == run_two
    assert run_one != run_other
    transports = {decision.transport for decision in run_one}
    assert transports == {None, "drop_response", "delay_ms"}


def test_setting_the_plan_again_restarts_the_stream() -> None:
    made = injector({"seed": 1, "rules": [{"fault": "error_500", "percent": 50}]})
    first = [made.decide("charge") for _ in range(20)]
    made.set_plan({"seed": 1, "rules": [{"fault": "error_500", "percent": 50}]})

    assert [made.decide("charge") for _ in range(20)] == first


def test_next_n_counts_down_per_matching_call() -> None:
    made = injector({"rules": [{"fault": "error_500", "next_n": 2, "ops": ["refund"]}]})

    assert made.decide("charge").transport is None
    assert [made.decide("refund").transport for _ in range(3)] == ["error_500", "error_500", None]
    assert made.describe()["rules"][0]["remaining"] == 0


def test_the_first_transport_fault_wins_and_the_others_combine() -> None:
    made = injector(
        {
            "hold_ms": 10,
            "settle_late_ms": 20,
            "rules": [
                {"fault": "drop_request", "percent": 100},
                {"fault": "error_500", "percent": 100},
                {"fault": "duplicate_webhook", "percent": 100},
                {"fault": "settle_late", "next_n": 1},
            ],
        }
    )

    decision = made.decide("charge")

    assert decision.transport == "drop_request"
    assert decision.duplicate_webhook and decision.settle_late and not decision.reorder_webhooks
    assert (decision.hold_ms, decision.settle_late_ms) == (10, 20)
    assert decision.rules_fired == (0, 1, 2, 3)


def test_no_plan_means_no_faults_and_the_settings_defaults() -> None:
    made = FaultInjector(SandboxSettings(hold_ms=5, settle_late_ms=6))
    decision = made.decide("charge")

    assert decision.transport is None and not decision.settle_late
    assert (decision.hold_ms, decision.settle_late_ms) == (5, 6)
    assert made.describe() == {"seed": 0, "rules": [], "hold_ms": 5, "settle_late_ms": 6, "active": False}


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"rules": [{"fault": "drop_everything", "percent": 1}]}, "rules.0.fault"),
        ({"rules": [{"fault": "error_500", "percent": 1, "colour": "red"}]}, "colour"),
        ({"rules": [{"fault": "error_500"}]}, "exactly one of"),
        ({"rules": [{"fault": "error_500", "percent": 1, "next_n": 1}]}, "exactly one of"),
        ({"rules": [{"fault": "error_500", "percent": 101}]}, "percent"),
        ({"rules": [{"fault": "error_500", "percent": 0.5}]}, "percent"),  # no floats, even here
        ({"rules": [{"fault": "error_500", "percent": True}]}, "percent"),
        ({"rules": [{"fault": "error_500", "percent": "50"}]}, "percent"),
        ({"rules": [{"fault": "error_500", "next_n": 0}]}, "next_n"),
        ({"rules": [{"fault": "delay_ms", "percent": 10}]}, "'delay_ms' is required"),
        ({"rules": [{"fault": "error_500", "percent": 10, "delay_ms": 5}]}, "'delay_ms' is required"),
        ({"rules": [{"fault": "delay_ms", "percent": 10, "delay_ms": 60_001}]}, "delay_ms"),
        ({"rules": [{"fault": "error_500", "percent": 10, "ops": ["transfer"]}]}, "ops"),
        ({"rules": [{"fault": "error_500", "percent": 10, "ops": []}]}, "ops"),
        ({"rules": [{"fault": "error_500", "percent": 10, "ops": ["charge", "charge"]}]}, "twice"),
        ({"rules": [{"fault": "settle_late", "percent": 10, "ops": ["get_charge"]}]}, "charge' and 'refund' only"),
        ({"hold_ms": 60_001}, "hold_ms"),
        ({"seed": -1}, "seed"),
        ({"rules": [{"fault": "error_500", "percent": 1}] * 51}, "rules"),
        ({"faults": []}, "faults"),
    ],
)
def test_invalid_plans_are_refused_with_a_clear_message(plan: dict[str, Any], message: str) -> None:
    made = FaultInjector(SandboxSettings())

    with pytest.raises(FaultPlanError) as refused:
        made.set_plan(plan)

    assert message in str(refused.value)
    assert made.describe()["active"] is False


def test_a_plan_must_be_an_object() -> None:
    with pytest.raises(FaultPlanError, match="JSON object"):
        FaultInjector(SandboxSettings()).set_plan([{"fault": "error_500"}])
