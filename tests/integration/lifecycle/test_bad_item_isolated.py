"""A worker round that meets an item it cannot move (its ledger hold resolved behind its flow's
back: `tests/support/tamper.py`) leaves that item as the evidence left it, its money where it
was, records and counts the fault, shows it to a person, backs it off and then parks it; and
moves every other tenant's items in the same round (lifecycle/faults.py). On SQLite and
PostgreSQL."""

from __future__ import annotations

from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.refunds import service as refunds
from paycore.refunds.service import NewRefund
from paycore.workers.jobs import queue_payouts, resolve_payments, resolve_payouts, send_payouts, send_refunds
from tests.integration.lifecycle.support import (
    TENANTS,
    account,
    console_shows,
    context,
    faults_metric,
    later,
    load,
    notes,
    pay,
    tenants,
)
from tests.integration.ops.conftest import Console, act
from tests.support import tamper
from tests.support.payouts import balance, funded_source, schedule

PER_TENANT = 2


def transfer_status(console: Console, tenant_id: str, transfer_id: str) -> str:
    with console.env.database.read() as connection:
        return ledger.get_transfer(connection, tenant_id, transfer_id).status


def test_a_send_round_sends_every_other_tenants_payout_past_one_it_cannot_move(console: Console) -> None:
    keys = tenants(console)
    database = console.env.database
    sources = {tenant: funded_source(database, tenant, 100_000) for tenant in TENANTS}
    # The first scheduled is the first claimed (oldest due, then by id): the poisoned one.
    poisoned = schedule(database, "acme", sources["acme"], 1_000)
    others = [schedule(database, tenant, sources[tenant], 2_000 + n) for tenant in TENANTS for n in range(PER_TENANT)]
    tamper.void_hold(database, "acme", poisoned.transfer_id)
    available_before = balance(database, "acme", sources["acme"])[2]
    worker = context(console)
    assert queue_payouts(worker) == 1 + len(others)

    assert send_payouts(worker) == 1 + len(others)  # one round, every payout claimed and sent

    for payout in others:
        assert load(console, payouts.MACHINE, payout.tenant_id, payout.id).status == "sent", payout.tenant_id
    stuck = load(console, payouts.MACHINE, "acme", poisoned.id)
    assert (stuck.status, stuck.fault_code, stuck.attempts) == ("processing", "transfer_not_pending", 1)
    assert stuck.faulted_at_us is not None and stuck.claimed_by is None
    assert stuck.next_attempt_at_us is not None  # backed off, not parked yet
    # Its money did not move: the hold stays voided, the source as it was (the other acme
    # payouts' holds were posted: posted, not available, money).
    assert transfer_status(console, "acme", poisoned.transfer_id) == "voided"
    assert balance(database, "acme", sources["acme"])[2] == available_before
    # The bank's answer is recorded as the round's attempt, and the fault beside it.
    [call] = notes(console, keys["acme"], poisoned.id, "processor.send_payout")
    assert call["data"]["attempt"] == 1 and call["data"]["response"]["status"] == "accepted"
    [fault] = notes(console, keys["acme"], poisoned.id, "payout.faulted")
    assert fault["actor"] == "worker:send_payouts"
    assert {key: fault["data"][key] for key in ("job", "error", "status")} == {
        "job": "send_payouts",
        "error": "transfer_not_pending",
        "status": "processing",
    }
    assert faults_metric(console)["send_payouts"] == 1
    console_shows(console, "payout", poisoned.id, "transfer_not_pending")

    # Asked again with backoff, never hot: each round records the fault once more; once its
    # rounds ran out (attempts_max 3) it is parked for a person and no round takes it.
    for _ in range(4):
        later()
        resolve_payouts(worker)
    parked = load(console, payouts.MACHINE, "acme", poisoned.id)
    assert (parked.status, parked.fault_code, parked.attempts) == ("processing", "transfer_not_pending", 3)
    assert parked.next_attempt_at_us is None
    counted = faults_metric(console)
    assert (counted["send_payouts"], counted["resolve_payouts"]) == (1, 2)
    later()
    resolve_payouts(worker)  # parked: not taken again
    assert faults_metric(console)["resolve_payouts"] == 2
    assert transfer_status(console, "acme", poisoned.transfer_id) == "voided"

    # A person retries it from the console: one more round, which meets the same fault.
    alice = console.signed_in("alice")
    page = f"/ops/payouts/{poisoned.id}"
    assert act(alice, f"/ops/in-doubt/payout/{poisoned.id}/ask", page=page).status_code == 303
    assert load(console, payouts.MACHINE, "acme", poisoned.id).next_attempt_at_us is not None
    later()
    resolve_payouts(worker)
    assert faults_metric(console)["resolve_payouts"] == 3
    assert load(console, payouts.MACHINE, "acme", poisoned.id).status == "processing"


def test_a_resolve_round_settles_every_other_tenants_payment_past_one_it_cannot_move(console: Console) -> None:
    keys = tenants(console)
    client = console.env.client
    merchants = {tenant: account(client, keys[tenant]) for tenant in TENANTS}
    count = len(TENANTS) * PER_TENANT
    console.env.faults({"fault": "drop_response", "next_n": count + 1, "ops": ["charge"]})
    poisoned = pay(client, keys["bravo"], merchants["bravo"], 700)  # the oldest: the first claimed
    others = [
        (tenant, pay(client, keys[tenant], merchants[tenant], 900 + n)) for tenant in TENANTS for n in range(PER_TENANT)
    ]
    assert {payment["status"] for payment in [poisoned, *(made for _, made in others)]} == {"in_doubt"}
    stuck_before = load(console, payments.MACHINE, "bravo", poisoned["id"])
    tamper.void_hold(console.env.database, "bravo", stuck_before.transfer_id)
    later()

    assert resolve_payments(context(console)) == count + 1

    for tenant, payment in others:
        assert load(console, payments.MACHINE, tenant, payment["id"]).status == "succeeded", tenant
    stuck = load(console, payments.MACHINE, "bravo", poisoned["id"])
    assert (stuck.status, stuck.fault_code) == ("in_doubt", "transfer_not_pending")
    assert transfer_status(console, "bravo", stuck.transfer_id) == "voided"
    [fault] = notes(console, keys["bravo"], poisoned["id"], "payment.faulted")
    assert (fault["data"]["job"], fault["data"]["status"]) == ("resolve_payments", "in_doubt")
    assert faults_metric(console)["resolve_payments"] == 1
    console_shows(console, "payment", poisoned["id"], "transfer_not_pending")


def test_a_send_round_of_refunds_refunds_every_other_tenants_past_one_it_cannot_move(console: Console) -> None:
    keys = tenants(console)
    client = console.env.client
    database = console.env.database
    paid = {tenant: pay(client, keys[tenant], account(client, keys[tenant]), 5_000) for tenant in TENANTS}

    def refund(tenant: str, amount_minor: int) -> str:
        new = NewRefund(payment_id=paid[tenant]["id"], amount_minor=amount_minor)
        return database.transaction(
            lambda connection: refunds.create_refund(connection, tenant, new, now_us=now_us(), actor="local").id
        )

    poisoned = refund("carol", 100)  # the first due: the first claimed
    others = [(tenant, refund(tenant, 200 + n)) for tenant in TENANTS for n in range(PER_TENANT)]
    stuck_before = load(console, refunds.MACHINE, "carol", poisoned)
    assert stuck_before.transfer_id is not None
    tamper.void_hold(database, "carol", stuck_before.transfer_id)

    assert send_refunds(context(console)) == 1 + len(others)

    for tenant, refund_id in others:
        assert load(console, refunds.MACHINE, tenant, refund_id).status == "succeeded", tenant
    stuck = load(console, refunds.MACHINE, "carol", poisoned)
    assert (stuck.status, stuck.fault_code) == ("processing", "transfer_not_pending")
    assert transfer_status(console, "carol", stuck_before.transfer_id) == "voided"
    [fault] = notes(console, keys["carol"], poisoned, "refund.faulted")
    assert (fault["data"]["job"], fault["data"]["status"]) == ("send_refunds", "processing")
    assert faults_metric(console)["send_refunds"] == 1
    console_shows(console, "refund", poisoned, "transfer_not_pending")
