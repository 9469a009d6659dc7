"""A tenant's own API key against the transfers paycore's flows own (docs/ledger.md, "Who may
move a transfer"). Each test is one of the attacks that moved money wrongly on a tenant's key
alone: the transfer ids come from the tenant's own statement (`GET /v1/accounts/{id}/entries`),
as an attacker finds them. Now each attempt is 409 `managed_transfer` naming the owner, or 403
`system_account`, nothing moves, and the flow goes on as if nobody had tried. On SQLite and
PostgreSQL, through the real sandbox processor and bank rail."""

from __future__ import annotations

import itertools
from typing import Any

from paycore.workers.jobs import WorkerContext, queue_payouts, send_payouts
from tests.integration.payments.conftest import Env
from tests.integration.payouts.support import ach, bank_finishes, get, payouts_at_bank, schedule
from tests.integration.refunds import support as refunds
from tests.support.payouts import balance, books_ok, funded_source

TENANT = "default"
_keys = itertools.count(1)


def attack(env: Env, transfer_id: str, action: str, body: dict[str, Any] | None = None) -> Any:
    return env.client.post(
        f"/v1/transfers/{transfer_id}/{action}", json=body, headers={"Idempotency-Key": f"attack-{next(_keys)}"}
    )


def statement_transfers(env: Env, account_id: str) -> list[str]:
    """The transfer ids of the account's statement, in order, as the tenant reads them."""
    response = env.client.get(f"/v1/accounts/{account_id}/entries?limit=100")
    assert response.status_code == 200, response.text
    return [entry["transfer_id"] for entry in response.json()["data"]]


def refused_as_managed(response: Any, owner_id: str) -> None:
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["error"] == "managed_transfer" and body["owner_id"] == owner_id, body
    assert owner_id in body["message"]


def send(env: Env) -> int:
    context = WorkerContext.create(env.database, env.settings, env.processor)
    queue_payouts(context)
    return send_payouts(context)


def test_a_scheduled_payouts_hold_cannot_be_voided_to_pay_the_money_out_twice(env: Env) -> None:
    source = funded_source(env.database, TENANT, 2_500)
    first = schedule(env, ach(source, 2_500))
    [hold] = statement_transfers(env, source)[1:]
    refused_as_managed(attack(env, hold, "void"), first["id"])
    refused_as_managed(attack(env, hold, "post"), first["id"])
    assert balance(env.database, TENANT, source) == (2_500, -2_500, 0)

    second = env.client.post("/v1/payouts", json=ach(source, 2_500), headers={"Idempotency-Key": "po-again"})
    assert (second.status_code, second.json()["error"]) == (422, "insufficient_funds")
    assert send(env) == 1
    bank_finishes(env)
    assert get(env, first["id"])["status"] == "settled"
    assert payouts_at_bank(env) == 1
    assert books_ok(env.database)


def test_a_settled_payouts_transfer_cannot_be_reversed_to_pay_it_again(env: Env) -> None:
    source = funded_source(env.database, TENANT, 2_500)
    payout = schedule(env, ach(source, 2_500))
    send(env)
    bank_finishes(env)
    assert get(env, payout["id"])["status"] == "settled"
    for transfer_id in statement_transfers(env, source)[1:]:  # the hold and its post
        refused_as_managed(attack(env, transfer_id, "reverse"), payout["id"])
    assert balance(env.database, TENANT, source) == (0, 0, 0)
    again = env.client.post("/v1/payouts", json=ach(source, 2_500), headers={"Idempotency-Key": "po-twice"})
    assert (again.status_code, again.json()["error"]) == (422, "insufficient_funds")
    assert payouts_at_bank(env) == 1
    assert books_ok(env.database)


def test_a_succeeded_refunds_transfer_cannot_be_reversed_to_keep_the_money(env: Env) -> None:
    merchant, payment_id = refunds.paid(env, amount_minor=1_000)
    refund = refunds.created(env, payment_id, 400)
    refunds.send(env)
    assert refunds.status_of(env, refund["id"]) == "succeeded"
    refund_transfers = statement_transfers(env, merchant)[2:]  # after the payment's hold and post
    assert len(refund_transfers) == 2
    for transfer_id in refund_transfers:
        refused_as_managed(attack(env, transfer_id, "reverse"), refund["id"])
    assert refunds.money(env, merchant) == (600, 0, 600)
    assert refunds.refundable(env, payment_id) == 600
    refunds.assert_ledger_verifies(env)


def test_a_payments_hold_cannot_be_posted_before_the_processor_answers(env: Env) -> None:
    merchant = env.account()
    env.faults({"fault": "drop_response", "next_n": 1})
    response = env.pay(merchant, token="tok_declined", amount_minor=5_000)
    assert (response.status_code, response.json()["status"]) == (202, "in_doubt")
    payment_id = response.json()["id"]
    [hold] = statement_transfers(env, merchant)
    refused_as_managed(attack(env, hold, "post"), payment_id)
    refused_as_managed(attack(env, hold, "void"), payment_id)
    assert env.balance(merchant)["pending_minor"] == 5_000 and env.balance(merchant)["available_minor"] == 0

    assert env.deliver() >= 1  # the processor's charge.failed webhook is taken (2xx), not refused
    payment = env.client.get(f"/v1/payments/{payment_id}").json()
    assert (payment["status"], payment["failure_code"]) == ("failed", "card_declined")
    after = env.balance(merchant)
    assert (after["posted_minor"], after["pending_minor"], after["available_minor"]) == (0, 0, 0)
    assert books_ok(env.database)


def test_paycores_own_accounts_are_not_the_tenants_to_move(env: Env) -> None:
    merchant, _ = refunds.paid(env, amount_minor=1_000)
    clearing = env.client.get(f"/v1/transfers/{statement_transfers(env, merchant)[0]}").json()
    [clearing_id] = [entry["account_id"] for entry in clearing["entries"] if entry["direction"] == "debit"]
    taken = {"debit_account_id": clearing_id, "credit_account_id": merchant, "amount_minor": 50_000, "currency": "USD"}
    entries = {
        "entries": [
            {"account_id": merchant, "direction": "debit", "amount_minor": 10},
            {"account_id": clearing_id, "direction": "credit", "amount_minor": 10},
        ]
    }
    for path, body, param in (
        ("/v1/transfers", taken, "entries[0].account_id"),
        ("/v1/transfers", {**taken, "pending": True}, "entries[0].account_id"),
        ("/v1/transfers", entries, "entries[1].account_id"),
        ("/v1/transfers/batch", {"transfers": [entries]}, "transfers[0].entries[1].account_id"),
    ):
        response = env.client.post(path, json=body, headers={"Idempotency-Key": f"take-{next(_keys)}"})
        assert response.status_code == 403, response.text
        assert (response.json()["error"], response.json()["param"]) == ("system_account", param)
    created = env.client.post(
        "/v1/accounts", json={"code": "processor.clearing.EUR", "currency": "EUR", "normal_balance": "debit"}
    )
    assert (created.status_code, created.json()["error"], created.json()["param"]) == (403, "system_account", "code")
    assert env.balance(merchant)["posted_minor"] == 1_000
    assert env.balance(clearing_id)["posted_minor"] == 1_000
    assert books_ok(env.database)


def test_the_tenants_own_transfers_still_post_void_and_reverse(env: Env) -> None:
    one, two = env.account("merchant.one"), env.account("merchant.two")
    funding = env.client.post(
        "/v1/accounts", json={"code": "funding", "currency": "USD", "normal_balance": "debit"}
    ).json()["id"]

    def transfer(**extra: Any) -> dict[str, Any]:
        body = {"debit_account_id": funding, "credit_account_id": one, "amount_minor": 700, "currency": "USD"}
        response = env.client.post(
            "/v1/transfers", json={**body, **extra}, headers={"Idempotency-Key": f"own-{next(_keys)}"}
        )
        assert response.status_code == 201, response.text
        assert response.json()["owner_id"] is None
        return dict(response.json())

    assert attack(env, transfer(pending=True)["id"], "post").status_code == 200
    assert attack(env, transfer(pending=True)["id"], "void").status_code == 200
    assert attack(env, transfer()["id"], "reverse").status_code == 201
    assert two and env.balance(one)["posted_minor"] == 700
    assert books_ok(env.database)
