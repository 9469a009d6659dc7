"""`paycore_authorizations_open` and `paycore_authorization_oldest_age_seconds` (SPEC §6.1, §12;
issue 40 point 4), on both databases with the real sandbox: an authorization counts from when it
is made until it is captured or canceled, and its age moves with the time it was made (moved by
writing the timestamp, never by mocking the clock or the database)."""

from __future__ import annotations

import pytest

from tests.integration.http.test_operations_metrics import move_back, value
from tests.integration.payments.capture_support import authorized, cancel, capture
from tests.integration.payments.conftest import Env, env, processor, sandbox

__all__ = ["env", "processor", "sandbox"]

DAY_S = 86_400
PAST_THE_ALERT_S = 9 * DAY_S  # PaycoreAuthorizationOutlivedItsLifetime: over 8 days


@pytest.fixture
def transport() -> str:
    return "inprocess"


def gauges(env: Env) -> tuple[int, int]:
    return (
        value(env.client, "paycore_authorizations_open"),
        value(env.client, "paycore_authorization_oldest_age_seconds"),
    )


def test_open_authorizations_count_until_captured_or_canceled_and_show_the_oldest_age(env: Env) -> None:
    assert gauges(env) == (0, 0)
    merchant = env.account()
    first = authorized(env, merchant, 5000)
    second = authorized(env, merchant, 3000)
    env.pay(merchant)  # an automatic payment is no authorization
    assert gauges(env)[0] == 2
    move_back(env, "payments", ("created_at_us",), PAST_THE_ALERT_S, id=first["id"])

    count, age_s = gauges(env)

    assert count == 2 and PAST_THE_ALERT_S <= age_s < PAST_THE_ALERT_S + 60
    assert capture(env, first["id"], 1000).status_code == 200  # partial: the rest released, none open
    count, age_s = gauges(env)
    assert count == 1 and age_s < 60
    assert cancel(env, second["id"]).status_code == 200
    assert gauges(env) == (0, 0)
