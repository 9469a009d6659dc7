"""No statement of the money path scans the tenant's history, on either database (ADR 0027).

A payment (answered, replayed, answered late and resolved by the worker, answered late and
settled by its webhook), a refund (and its
creating phase on the data plane, called below the route; answered late and settled by its
webhook), a payout (settled, canceled, and answered late and sent by its webhook), a
credit, ledger transfers (a transfer, reversed, a batch, a hold posted, a hold voided) and an
authorization (made, `/metrics`' open authorizations read, canceled; and captured in part and
canceled on the data plane, behind the thin edges: ADR 0029) and a chargeback (opened, `/metrics`'
nearest evidence deadline read, accepted) run through the API and
the worker's jobs, as a user runs them, on a database holding a long history of the tenant:
every row of one run of each flow copied `COPIES` times (`tests/support/history.py`). Every
statement they run is planned as its database plans it (`capture.py`: SQLite's EXPLAIN QUERY
PLAN, triggers included; PostgreSQL's own plans, nested statements included), and every
history table it reads must be read through an index searched by a whole key or by a column
that names one object, or a work queue's range of due times (`explain.why_history`). A
statement that scans the tenant's history costs more with every payment the tenant makes.
A new statement on these paths is checked without being listed anywhere.

The statistics: those the database has once the history is written (`as migrated`: none on the
history, the migrations having found the tables empty), those gathered while the tables were
small (`analyzed young`: ANALYZE after the first run of the flows, before the history), and
current ones (`analyzed`). The plans are made after the history is written (the pool is emptied
first): a plan a PostgreSQL connection cached while a table was small is autovacuum's to
replace (docs/operations.md). PostgreSQL is checked with each statement's generic plan (the one
a prepared statement, a PL/pgSQL statement or a foreign key check keeps) and its custom plan.
`PAYCORE_PRINT_PLANS=1` (pytest -s) prints every read.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable

import pytest

from paycore.db.engine import Database
from paycore.disputes import service as disputes
from paycore.http.errors import dumps, render_refusal
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit import actors
from paycore.kit.clock import now_us
from paycore.payments import service as payments
from paycore.payouts import create as payouts_create
from paycore.payouts.types import NewPayout
from paycore.refunds import create as refunds_create
from paycore.refunds.create_plan import RefundRequest
from paycore.refunds.schemas import refund_json
from paycore_sandbox.disputes import OpenDisputeRequest
from tests.integration.payments.conftest import Env
from tests.integration.payouts import support as payouts
from tests.integration.plans import capture
from tests.integration.plans.explain import Read, why_history
from tests.integration.refunds import support as refunds
from tests.support.history import add_history
from tests.support.payouts import ACH, funded_source

TENANT = payouts.TENANT  # local mode's tenant
COPIES = 1_000
PRINT = os.environ.get("PAYCORE_PRINT_PLANS") == "1"
# Read by the flows on either database: proof that the plans were captured at all.
READ_TABLES = frozenset(
    {"payments", "refunds", "payouts", "ledger_accounts", "ledger_transfers", "ledger_entries", "events"}
    | {"idempotency_keys"}
)
_keys = itertools.count(1)


def _key(flow: str) -> dict[str, str]:
    return {"Idempotency-Key": f"{flow}-{next(_keys)}"}


class Flows:
    """The money path's flows, each run as a user runs it; `accounts` made once, before."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.merchant = env.account()
        self.other = env.account("merchant.other")
        self.source = funded_source(env.database, TENANT, 1_000_000)

    def all(self) -> dict[str, Callable[[], None]]:
        return {
            "payment": self.payment,
            "payment replayed": self.payment_replayed,
            "payment answered late": self.payment_answered_late,
            "payment settled by its webhook": self.payment_settled_by_its_webhook,
            "authorization captured": lambda: self.authorization("capture", {"amount_minor": 600}),
            "authorization canceled": lambda: self.authorization("cancel", {}),
            "refund": self.refund,
            "refund on the data plane": self.refund_data_plane,
            "refund settled by its webhook": self.refund_settled_by_its_webhook,
            "payout": self.payout,
            "payout canceled": self.payout_canceled,
            "payout on the data plane": self.payout_data_plane,
            "payout sent by its webhook": self.payout_sent_by_its_webhook,
            "payout returned by its webhook": self.payout_returned_by_its_webhook,
            "credit": self.credit,
            "transfer": self.transfer,
            "transfer reversed": self.transfer_reversed,
            "batch": self.batch,
            "hold posted": lambda: self.hold("post"),
            "hold voided": lambda: self.hold("void"),
            "authorizations gauges": self.authorizations_gauges,
            "disputes gauge": self.disputes_gauge,
        }

    def payment(self) -> None:
        assert self.env.pay(self.merchant).status_code == 201
        self.env.deliver()

    def payment_replayed(self) -> None:
        key = f"replayed-{next(_keys)}"
        assert self.env.pay(self.merchant, key=key).status_code == 201
        assert self.env.pay(self.merchant, key=key).status_code == 201

    def payment_answered_late(self) -> None:
        self.env.faults({"fault": "drop_response", "next_n": 1})
        response = self.env.pay(self.merchant)
        assert response.status_code == 202, response.text
        assert self.env.resolve() == 1
        assert self.env.client.get(f"/v1/payments/{response.json()['id']}").json()["status"] == "succeeded"

    def payment_settled_by_its_webhook(self) -> None:
        """Its answer lost (`in_doubt`), then the processor's webhook settles it: the webhook's
        apply phase on the data plane (`inbound/apply_payment.py`, `paycore_inbound_apply_payment`)."""
        self.env.faults({"fault": "drop_response", "next_n": 1})
        response = self.env.pay(self.merchant)
        assert response.status_code == 202 and response.json()["status"] == "in_doubt", response.text
        assert self.env.deliver() >= 1
        settled = self.env.client.get(f"/v1/payments/{response.json()['id']}").json()
        assert settled["status"] == "succeeded" and settled["history"][-1]["cause"] == "webhook", settled

    def authorization(self, operation: str, body: dict[str, int]) -> None:
        """A manual payment (ADR 0029) authorized, then captured in part or canceled: accept,
        settle, begin and finish on the data plane, behind the thin edges."""
        response = self.env.pay(self.merchant, capture="manual")
        assert response.status_code == 201 and response.json()["status"] == "requires_capture", response.text
        self.env.deliver()
        path = f"/v1/payments/{response.json()['id']}/{operation}"
        done = self.env.client.post(path, json=body, headers=_key(operation))
        assert done.status_code == 200, done.text
        self.env.deliver()

    def refund(self) -> None:
        response = self.env.pay(self.merchant)
        assert response.status_code == 201, response.text
        refunds.created(self.env, response.json()["id"], 400)
        assert refunds.send(self.env) == 1
        self.env.deliver()

    def refund_settled_by_its_webhook(self) -> None:
        """Its answer lost (`in_doubt`), then the processor's webhook settles it: the refund's
        webhook on the data plane (`inbound/apply_refund.py`, `paycore_inbound_apply_refund`)."""
        response = self.env.pay(self.merchant)
        assert response.status_code == 201, response.text
        refund = refunds.created(self.env, response.json()["id"], 400)
        self.env.faults({"fault": "drop_response", "next_n": 1, "ops": ["refund"]})
        assert refunds.send(self.env) == 1 and refunds.status_of(self.env, refund["id"]) == "in_doubt"
        assert self.env.deliver() >= 1
        assert refunds.history(self.env, refund["id"])[-1] == ("in_doubt", "succeeded", "webhook")

    def refund_data_plane(self) -> None:
        """A refund's creating phase on the data plane (ADR 0026), below the route (which does not
        call it yet): the payment read where this process has not seen it, then the one call or
        the fixed list."""
        response = self.env.pay(self.merchant)
        assert response.status_code == 201, response.text
        scope = KeyScope(TENANT, f"plane-{next(_keys)}", "f" * 64, now_us=now_us(), expires_at_us=None)
        request = RefundRequest(response.json()["id"], 400, None, actors.LOCAL)
        outcome, replayed = refunds_create.create_refund(
            self.env.database,
            scope,
            request,
            render=lambda refund, history: dumps(refund_json(refund, history)),
            render_refusal=render_refusal,
        )
        assert outcome.status == 201 and not replayed and '"status":"pending"' in outcome.body, outcome
        assert refunds.send(self.env) == 1  # sent and settled as the route's refund is: none left due
        self.env.deliver()

    def payout(self) -> None:
        payouts.schedule(self.env, payouts.ach(self.source))
        assert payouts.queue_and_send(self.env) == 1
        payouts.bank_finishes(self.env)

    def payout_sent_by_its_webhook(self) -> None:
        """The bank's answer lost (`in_doubt`), then its `accepted` webhook moves it to `sent`:
        the payout's webhook on the data plane (`inbound/apply_payout.py`,
        `paycore_inbound_apply_payout`); its settlement's webhook after it, a sent payout's, is on the
        data plane too (`inbound/apply_payout_settlement.py`, `paycore_inbound_settle_payout`)."""
        payout = payouts.schedule(self.env, payouts.ach(self.source))
        self.env.faults({"fault": "drop_response", "next_n": 1, "ops": ["payout"]})
        assert payouts.queue_and_send(self.env) == 1 and payouts.get(self.env, payout["id"])["status"] == "in_doubt"
        payouts.bank_finishes(self.env)
        history = payouts.get(self.env, payout["id"])["history"]
        assert [(step["to"], step["cause"]) for step in history[-2:]] == [("sent", "webhook"), ("settled", "webhook")]

    def payout_returned_by_its_webhook(self) -> None:
        """The bank's answer lost (`in_doubt`), then its webhooks move it, the last one, `returned`,
        returning the settled payout on the data plane (`inbound/apply_payout_return.py`,
        `paycore_inbound_return_payout`)."""
        payout = payouts.schedule(self.env, payouts.ach(self.source, account_number=payouts.RETURNED_R02))
        self.env.faults({"fault": "drop_response", "next_n": 1, "ops": ["payout"]})
        assert payouts.queue_and_send(self.env) == 1 and payouts.get(self.env, payout["id"])["status"] == "in_doubt"
        payouts.bank_finishes(self.env)
        history = payouts.get(self.env, payout["id"])["history"]
        assert [step["to"] for step in history[-2:]] == ["settled", "returned"], history

    def payout_canceled(self) -> None:
        payout = payouts.schedule(self.env, payouts.ach(self.source))
        response = self.env.client.post(f"/v1/payouts/{payout['id']}/cancel", headers=_key("cancel"))
        assert response.status_code == 200 and response.json()["status"] == "canceled", response.text

    def payout_data_plane(self) -> None:
        """The payout's creating phase itself (`payouts.create`), until the route calls it."""
        key = f"payout-dp-{next(_keys)}"
        new = NewPayout(2_500, "USD", self.source, "ach", ACH, idempotency_key=key)
        scope = KeyScope(TENANT, key, "f" * 64, now_us=now_us(), expires_at_us=None)

        def never() -> Outcome:
            raise AssertionError("the data plane was expected to write this payout itself")

        answer = payouts_create.create(self.env.database, scope, new, actor="local", encode=dumps, reference=never)
        assert answer.status == 201, answer
        # canceled, so that no later flow's worker round finds it (or its history's copies) due
        payout_id = json.loads(answer.body)["id"]
        response = self.env.client.post(f"/v1/payouts/{payout_id}/cancel", headers=_key("cancel"))
        assert response.status_code == 200, response.text

    def credit(self) -> None:
        line = {"desc": "pack", "amount_minor": 500, "currency": "USD"}
        body = {"idempotency_key": f"credit-{next(_keys)}", "lines": [line]}
        response = self.env.client.post(f"/v1/tenants/{TENANT}/credits", json=body)
        assert response.status_code == 201, response.text

    def _transfer(self, **changes: object) -> str:
        body = {"debit_account_id": self.other, "credit_account_id": self.merchant, "amount_minor": 300, **changes}
        body["currency"] = "USD"
        response = self.env.client.post("/v1/transfers", json=body, headers=_key("transfer"))
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def transfer(self) -> None:
        self._transfer()

    def transfer_reversed(self) -> None:
        transfer = self._transfer()
        response = self.env.client.post(f"/v1/transfers/{transfer}/reverse", headers=_key("reverse"))
        assert response.status_code == 201, response.text

    def batch(self) -> None:
        one = {"debit_account_id": self.other, "credit_account_id": self.merchant, "amount_minor": 100}
        one["currency"] = "USD"
        response = self.env.client.post("/v1/transfers/batch", json={"transfers": [one, one]}, headers=_key("batch"))
        assert response.status_code == 201, response.text

    def authorizations_gauges(self) -> None:
        """`/metrics`' open authorizations (over every tenant), read at every scrape through the
        partial index of the open ones, never the payments' history: an authorization made, the
        gauges read, the authorization canceled (so that the history holds canceled ones, as a
        tenant's does: few of its payments wait for a capture at any time)."""
        authorized = self.env.pay(self.merchant, capture="manual")
        assert authorized.status_code == 201 and authorized.json()["status"] == "requires_capture", authorized.text
        with self.env.database.read() as connection:
            count, oldest_us = payments.authorizations_open(connection)
        assert count == 1 and oldest_us is not None, (count, oldest_us)
        response = self.env.client.post(f"/v1/payments/{authorized.json()['id']}/cancel", headers=_key("void"))
        assert response.status_code == 200 and response.json()["status"] == "canceled", response.text

    def disputes_gauge(self) -> None:
        """`/metrics`' nearest evidence deadline (over every tenant), read at every scrape through
        the partial index of the disputes awaiting an answer, never the disputes' history: a
        chargeback opened by the sandbox, the gauge read, the dispute accepted (so that the
        history holds decided ones, as a tenant's does)."""
        payment = self.env.pay(self.merchant)
        assert payment.status_code == 201, payment.text
        self.env.deliver()
        opened = OpenDisputeRequest(payment.json()["processor_reference"])
        self.env.sandbox.open_dispute(opened)
        assert self.env.deliver() >= 1  # dispute.created
        with self.env.database.read() as connection:
            due_us = disputes.evidence_due_first(connection)
        assert due_us is not None and due_us > now_us(), due_us
        listed = self.env.client.get("/v1/disputes", params={"payment_id": payment.json()["id"]}).json()["data"]
        response = self.env.client.post(f"/v1/disputes/{listed[0]['id']}/accept", headers=_key("accept"))
        assert response.status_code == 200 and response.json()["status"] == "lost", response.text

    def hold(self, action: str) -> None:
        hold = self._transfer(pending=True)
        response = self.env.client.post(f"/v1/transfers/{hold}/{action}", headers=_key(action))
        assert response.status_code in (200, 201), response.text


def _run(database: Database, flows: Flows, plan: str) -> list[str]:
    """Each flow once; the reads of its statements that scan the tenant's history."""
    problems: list[str] = []
    tables: set[str] = set()
    nested = False
    for name, flow in flows.all().items():
        with capture.reads(database, plan) as found:
            flow()
        problems.extend(_problems(name, plan, found))
        tables.update(read.table for read in found)
        nested = nested or any(read.nested for read in found)
        if PRINT:
            for read in found:
                print(f"{name} {plan}: {read.detail} | {' '.join(read.statement.split())[:150]}")
    assert tables >= READ_TABLES and nested, (plan, sorted(tables), nested)  # the plans were captured
    return problems


def _problems(flow: str, plan: str, found: list[Read]) -> list[str]:
    seen = set()
    problems = []
    for read in found:
        why = why_history(read)
        if why is not None and (read.detail, read.statement) not in seen:
            seen.add((read.detail, read.statement))
            problems.append(f"{flow} ({plan} plan): {read.detail}: {why}\n    in: {_short(read.statement)}")
    return problems


def _short(statement: str) -> str:
    """The statement without its list of columns, on one line."""
    return re.sub(r"^SELECT .+? FROM ", "SELECT ... FROM ", " ".join(statement.split()))[:600]


def _analyze(database: Database) -> None:
    with database.engine.connect() as connection:
        connection.exec_driver_sql("ANALYZE")
        connection.commit()


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("statistics", ["as migrated", "analyzed young", "analyzed"])
def test_no_money_path_statement_scans_the_tenants_history(env: Env, statistics: str) -> None:
    flows = Flows(env)
    for flow in flows.all().values():
        flow()
    if statistics == "analyzed young":
        _analyze(env.database)
    added = add_history(env.database, TENANT, COPIES)
    assert added["payments"] >= 3 * COPIES and added["ledger_entries"] >= 10 * COPIES, added
    if statistics == "analyzed":
        _analyze(env.database)
    env.database.engine.dispose()  # plans made from here on, on this history and these statistics
    plans = ["generic", "custom"] if env.database.is_postgres else ["sqlite"]
    problems = [problem for plan in plans for problem in _run(env.database, flows, plan)]
    assert not problems, "\n".join(problems)
