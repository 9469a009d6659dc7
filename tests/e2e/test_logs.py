"""The log of a real run (SPEC §12, issue 18 point 4): `paycore serve --dev` with its standard
error in a file, driven through credits, payments (one succeeded, one in doubt), payouts to an
account number and to an IBAN, and a 404. Then the log is read: every line is one JSON object
with the stable keys, one `http_request` line per request, the in-doubt and no-answer lines
are there, and no secret, key, card token, account number or IBAN is anywhere in it."""

from __future__ import annotations

import functools
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.payments_support import clean_env
from tests.e2e.support import CLI_TIMEOUT_S, START_TIMEOUT_S, STOP_TIMEOUT_S, Reply, call, free_port, paycore_command

WEBHOOK_SECRET = "whsec_Distinctive_7f3a9c_NeverLogged"
ACCOUNT_NUMBER = "000123456789"
IBAN = "DE89370400440532013000"
STABLE_KEYS = ("ts", "level", "logger", "event", "message")
ACCESS_KEYS = {"request_id", "tenant_id", "method", "route", "status", "latency_ms"}
WAIT_S = 30


@dataclass
class Run:
    port: int
    key: str
    log_path: Path
    process: subprocess.Popen[bytes]
    replies: list[Reply]

    def call(self, method: str, path: str, body: Any = None, **headers: str) -> Reply:
        sent = {"Authorization": f"Bearer {self.key}", **{k.replace("_", "-"): v for k, v in headers.items()}}
        reply = call(self.port, method, path, body, headers=sent)
        self.replies.append(reply)
        return reply

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    env = clean_env(
        PAYCORE_DATABASE_URL=f"sqlite:///{tmp_path / 'paycore.db'}",
        PAYCORE_SANDBOX_DATABASE_URL=f"sqlite:///{tmp_path / 'sandbox.db'}",
        PAYCORE_PROCESSOR_WEBHOOK_SECRET=WEBHOOK_SECRET,
        PAYCORE_PROCESSOR_TIMEOUT_MS="300",  # tok_timeout: no answer within this
        PAYCORE_WORKER_INTERVAL_MS="200",
    )
    created = subprocess.run(
        [*paycore_command(), "tenants", "create", "acme"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=True,
    )
    key = next(line.strip() for line in created.stdout.splitlines() if line.strip().startswith("pck_"))
    port = free_port()
    log_path = tmp_path / "serve.stderr"
    with open(log_path, "wb") as stderr, open(tmp_path / "serve.stdout", "wb") as stdout:
        process = subprocess.Popen(
            [*paycore_command(), "serve", "--dev", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=tmp_path,
            stdout=stdout,
            stderr=stderr,
        )
    the_run = Run(port, key, log_path, process, [])
    try:
        wait_until("the server answers", lambda: _healthy(port), START_TIMEOUT_S, log_path)
        yield the_run
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)


def _healthy(port: int) -> bool:
    try:
        return call(port, "GET", "/healthz", timeout_s=1).status == 200
    except OSError:
        return False


def wait_until(what: str, probe: Callable[[], bool], timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s\n{log_path.read_text()[-4000:]}")


def make_account(run: Run, code: str, currency: str, normal_balance: str) -> str:
    body = {"code": code, "currency": currency, "normal_balance": normal_balance}
    reply = run.call("POST", "/v1/accounts", body, Idempotency_Key=f"acct-{code}")
    assert reply.status == 201, reply
    return str(reply.body["id"])


def fund(run: Run, currency: str, amount_minor: int) -> str:
    """A credit-normal account holding `amount_minor`, funded from a debit-normal one."""
    source = make_account(run, f"funding.{currency.lower()}", currency, "debit")
    seller = make_account(run, f"seller.{currency.lower()}", currency, "credit")
    body = {"debit_account_id": source, "credit_account_id": seller, "amount_minor": amount_minor, "currency": currency}
    reply = run.call("POST", "/v1/transfers", body, Idempotency_Key=f"fund-{currency}")
    assert reply.status == 201, reply
    return seller


def pay(run: Run, key: str, token: str, shop: str) -> Reply:
    body = {
        "amount_minor": 2500,
        "currency": "USD",
        "source": {"type": "card", "token": token},
        "destination_account": shop,
    }
    return run.call("POST", "/v1/payments", body, Idempotency_Key=key)


def payout(run: Run, key: str, source: str, rail: str, beneficiary: dict[str, str]) -> Reply:
    currency = "USD" if rail == "ach" else "EUR"
    body = {
        "amount_minor": 1000,
        "currency": currency,
        "source_account": source,
        "rail": rail,
        "beneficiary": beneficiary,
    }
    reply = run.call("POST", "/v1/payouts", body, Idempotency_Key=key)
    assert reply.status == 201, reply
    return reply


def payout_status(run: Run, payout_id: str) -> str:
    return str(
        call(run.port, "GET", f"/v1/payouts/{payout_id}", headers={"Authorization": f"Bearer {run.key}"}).body["status"]
    )


def payout_left_the_worker(run: Run, payout_id: str) -> bool:
    return payout_status(run, payout_id) not in ("scheduled", "queued", "processing")


@pytest.mark.slow
def test_the_log_of_a_run_is_json_lines_with_request_ids_and_no_secrets(run: Run) -> None:
    credit = {"idempotency_key": "c1", "lines": [{"desc": "welcome", "amount_minor": 500, "currency": "USD"}]}
    assert run.call("POST", "/v1/tenants/acme/credits", credit, X_Request_Id="my-credit.1").status == 201
    shop = make_account(run, "merchant.shop", "USD", "credit")
    paid = pay(run, "order-1", "tok_ok", shop)
    assert paid.status == 201 and paid.body["status"] == "succeeded", paid
    doubtful = pay(run, "order-2", "tok_timeout", shop)
    assert doubtful.status == 202 and doubtful.body["status"] == "in_doubt", doubtful
    ach = payout(
        run,
        "po-ach",
        fund(run, "USD", 5000),
        "ach",
        {"name": "Ada", "routing_number": "110000000", "account_number": ACCOUNT_NUMBER},
    )
    sepa = payout(run, "po-sepa", fund(run, "EUR", 5000), "sepa", {"name": "Emilie", "iban": IBAN})
    missing = run.call("GET", "/v1/payments/pay_nothing_here")
    assert missing.status == 404
    for sent in (ach, sepa):  # the worker sent them to the bank: its calls are in the log too
        wait_until(
            "payout sent",
            functools.partial(payout_left_the_worker, run, sent.body["id"]),
            WAIT_S,
            run.log_path,
        )

    lines = run.lines()
    for line in lines:
        assert list(line)[: len(STABLE_KEYS)] == list(STABLE_KEYS), line
        assert line["ts"].endswith("Z") and isinstance(line["event"], str)

    access = [line for line in lines if line["event"] == "http_request"]
    for reply in run.replies:
        request_id = reply.headers["x-request-id"]
        mine = [line for line in access if line["request_id"] == request_id]
        assert len(mine) == 1, (request_id, mine)
        assert set(mine[0]) >= ACCESS_KEYS and mine[0]["status"] == reply.status
        assert mine[0]["tenant_id"] == "acme" and type(mine[0]["latency_ms"]) is int
    routes = {line["route"] for line in access}
    assert {"/v1/payments", "/v1/payments/{payment_id}", "/v1/tenants/{tenant_id}/credits", "/v1/payouts"} <= routes
    assert not any("pay_nothing_here" in line["route"] for line in access)
    assert [line["request_id"] for line in access if line["request_id"] == "my-credit.1"] == ["my-credit.1"]

    doubt_id = doubtful.body["id"]
    no_answer = [
        line for line in lines if line["event"] == "processor_no_answer" and line.get("payment_id") == doubt_id
    ]
    assert no_answer and no_answer[0]["request_id"] == doubtful.headers["x-request-id"]
    assert no_answer[0]["operation"] == "charge" and type(no_answer[0]["latency_ms"]) is int
    in_doubt = [line for line in lines if line["event"] == "in_doubt" and line.get("payment_id") == doubt_id]
    assert len(in_doubt) == 1 and in_doubt[0]["tenant_id"] == "acme" and in_doubt[0]["level"] == "warning"

    text = run.log_path.read_text()
    for secret in (run.key, WEBHOOK_SECRET, "tok_ok", "tok_timeout", ACCOUNT_NUMBER, IBAN):
        assert secret not in text, secret

    events = call(
        run.port, "GET", f"/v1/payments/{paid.body['id']}/events", headers={"Authorization": f"Bearer {run.key}"}
    )
    assert events.status == 200, events
    by_request = [
        event for event in events.body["data"] if event["data"].get("request_id") == paid.headers["x-request-id"]
    ]
    assert {event["kind"] for event in by_request} >= {"state_change", "processor_call"}, events.body


@pytest.mark.parametrize(
    ("extra", "args", "reason", "named"),
    [
        ({}, ["--host", "0.0.0.0"], "local_mode", "0.0.0.0"),
        ({"PAYCORE_BODY_BYTES_MAX": "lots"}, [], "configuration", "PAYCORE_BODY_BYTES_MAX"),
        ({"PAYCORE_LOG_FORMAT": "xml"}, [], "configuration", "PAYCORE_LOG_FORMAT"),
        ({"PAYCORE_DATABASE_URL": "mysql://nowhere"}, [], "configuration", "PAYCORE_DATABASE_URL"),
    ],
)
def test_a_refused_start_is_a_start_refused_line(
    tmp_path: Path, extra: dict[str, str], args: list[str], reason: str, named: str
) -> None:
    env = clean_env(**{"PAYCORE_DATABASE_URL": f"sqlite:///{tmp_path / 'paycore.db'}", **extra})
    result = subprocess.run(
        [*paycore_command(), "serve", "--port", "0", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert result.returncode != 0
    lines = [json.loads(line) for line in result.stderr.splitlines()]  # nothing but JSON lines
    [refused] = [line for line in lines if line["event"] == "start_refused"]
    assert refused["reason"] == reason and refused["level"] == "error"
    assert named in refused["message"]
