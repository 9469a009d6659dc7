"""Payouts through the workers and the sandbox bank rail, over both transports and both
databases (SPEC §11): sent once, every attempt recorded, a timeout is in doubt until the
bank's status answers, settlement and returns with their ledger effects."""

from __future__ import annotations

import datetime as dt

from tests.integration.payments.conftest import Env
from tests.integration.payouts.support import (
    REJECTED_R03,
    RETURNED_R02,
    TENANT,
    ach,
    bank_finishes,
    events,
    get,
    payouts_at_bank,
    queue_and_send,
    resolve,
    schedule,
)
from tests.support.payouts import balance, books_ok, funded_source, system_balance


def test_a_payout_is_sent_settles_and_pays_its_fee(env: Env) -> None:
    source = funded_source(env.database, TENANT, 10_000)
    payout = schedule(env, ach(source))
    assert queue_and_send(env) == 1
    sent = get(env, payout["id"])
    assert sent["status"] == "sent" and sent["bank_reference"] and sent["attempts"] == 1
    assert balance(env.database, TENANT, source) == (7_500, 0, 7_500)
    [attempt] = events(env, payout["id"], "processor_call")
    assert attempt["data"]["attempt"] == 1 and attempt["data"]["request"]["account_number"] == "6789"
    assert attempt["data"]["response"]["status"] == "accepted" and attempt["data"]["latency_ms"] >= 0

    bank_finishes(env)
    settled = get(env, payout["id"])
    assert settled["status"] == "settled" and settled["returnable_until"]
    assert [(h["from"], h["to"]) for h in settled["history"]] == [
        (None, "scheduled"),
        ("scheduled", "queued"),
        ("queued", "processing"),
        ("processing", "sent"),
        ("sent", "settled"),
    ]
    assert [(a["kind"], a["amount_minor"]) for a in settled["adjustments"]] == [("fee", 25)]
    assert system_balance(env.database, TENANT, "payouts.in_transit.USD") == 0
    assert system_balance(env.database, TENANT, "bank.cash.USD") == -2_525
    assert system_balance(env.database, TENANT, "payouts.fees.USD") == 25
    assert payouts_at_bank(env) == 1
    assert books_ok(env.database)


def test_a_rejected_payout_fails_and_gives_the_money_back(env: Env) -> None:
    source = funded_source(env.database, TENANT, 10_000)
    payout = schedule(env, ach(source, account_number=REJECTED_R03))
    queue_and_send(env)
    bank_finishes(env)
    failed = get(env, payout["id"])
    assert (failed["status"], failed["failure_code"]) == ("failed", "R03")
    assert balance(env.database, TENANT, source) == (10_000, 0, 10_000)
    assert books_ok(env.database)


def test_a_returned_payout_credits_the_source_and_books_the_return_fee(env: Env) -> None:
    source = funded_source(env.database, TENANT, 10_000)
    payout = schedule(env, ach(source, account_number=RETURNED_R02))
    queue_and_send(env)
    bank_finishes(env)
    returned = get(env, payout["id"])
    assert (returned["status"], returned["return_code"]) == ("returned", "R02")
    kinds = sorted((a["kind"], a["amount_minor"]) for a in returned["adjustments"])
    assert kinds == [("fee", 25), ("return", 2_500), ("return_fee", 200)]
    assert balance(env.database, TENANT, source) == (10_000, 0, 10_000)
    assert system_balance(env.database, TENANT, "payouts.fees.USD") == 225
    assert system_balance(env.database, TENANT, "bank.cash.USD") == -225
    assert books_ok(env.database)


def test_the_resolver_follows_a_sent_payout_when_no_webhook_comes(env: Env) -> None:
    source = funded_source(env.database, TENANT, 10_000)
    payout = schedule(env, ach(source))
    queue_and_send(env)
    bank_finishes(env, deliver=False)
    assert get(env, payout["id"])["status"] == "sent"
    assert resolve(env) == 1
    assert get(env, payout["id"])["status"] == "settled"
    assert [e["data"]["attempt"] for e in events(env, payout["id"], "processor_call")] == [1, 2]


def test_a_lost_response_is_in_doubt_until_the_bank_says_sent(env: Env) -> None:
    source = funded_source(env.database, TENANT, 10_000)
    payout = schedule(env, ach(source))
    env.faults({"fault": "drop_response", "next_n": 1, "ops": ["payout"]})
    queue_and_send(env)
    in_doubt = get(env, payout["id"])
    assert in_doubt["status"] == "in_doubt"
    assert balance(env.database, TENANT, source) == (10_000, -2_500, 7_500)  # still held, never guessed
    assert resolve(env) == 1
    assert get(env, payout["id"])["status"] == "sent"
    assert payouts_at_bank(env) == 1
    calls = events(env, payout["id"], "processor_call")
    assert [(c["type"], c["data"]["attempt"]) for c in calls] == [
        ("processor.send_payout", 1),
        ("processor.get_payout", 2),
    ]
    assert calls[0]["data"]["response"]["outcome"] == "unreachable"


def test_a_lost_request_is_sent_again_with_the_same_reference(env: Env) -> None:
    source = funded_source(env.database, TENANT, 10_000)
    payout = schedule(env, ach(source))
    env.faults({"fault": "drop_request", "next_n": 1, "ops": ["payout"]})
    queue_and_send(env)
    assert get(env, payout["id"])["status"] == "in_doubt"
    assert payouts_at_bank(env) == 0
    resolve(env)  # get_payout: not found -> the same request again
    assert get(env, payout["id"])["status"] == "sent"
    assert payouts_at_bank(env) == 1
    types = [c["type"] for c in events(env, payout["id"], "processor_call")]
    assert types == ["processor.send_payout", "processor.get_payout", "processor.send_payout"]


def test_a_500_is_in_doubt_and_resolved_by_status(env: Env) -> None:
    source = funded_source(env.database, TENANT, 10_000)
    payout = schedule(env, ach(source))
    env.faults({"fault": "error_500", "next_n": 1, "ops": ["payout"]})
    queue_and_send(env)
    assert get(env, payout["id"])["status"] == "in_doubt"
    resolve(env)
    bank_finishes(env)
    assert get(env, payout["id"])["status"] == "settled"
    assert payouts_at_bank(env) == 1
    assert books_ok(env.database)


def test_a_payout_for_a_later_day_waits(env: Env) -> None:
    source = funded_source(env.database, TENANT, 10_000)
    tomorrow = (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)).isoformat()
    payout = schedule(env, ach(source, execute_on=tomorrow))
    assert queue_and_send(env) == 0
    assert get(env, payout["id"])["status"] == "scheduled"
