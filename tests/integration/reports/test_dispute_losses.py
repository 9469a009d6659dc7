"""The loss report's disputes on payments (SPEC §6.2, issue 41 point 4; docs/losses.md,
"Disputes on payments"): fees and lost chargebacks per currency, from real disputes the sandbox
opened (`tok_disputed` and its admin call) and decided, on SQLite and PostgreSQL, through the
API, the CLI and the console's figure of the month."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from paycore.cli.main import app as cli
from paycore.reports import losses
from tests.integration.disputes.support import LATER_US, dispute, disputes_of, later, open_at_sandbox, paid
from tests.integration.payments.conftest import Env, env, processor, sandbox

__all__ = ["env", "processor", "sandbox"]

FEE_MINOR = 1500  # the sandbox's dispute fee
WINDOW_US = 7 * 86_400_000_000  # the sandbox's evidence window (SandboxSettings)
LOSS_MINOR = 4 * FEE_MINOR + 5000 + 3000  # four_disputes': every fee, the two lost amounts


@pytest.fixture
def transport() -> str:
    return "inprocess"  # the transports are the dispute tests' subject; here it is the report


def report(env: Env, **params: Any) -> dict[str, Any]:
    response = env.client.get("/v1/reports/losses", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def disputed(env: Env, merchant: str, amount_minor: int) -> dict[str, Any]:
    """A payment charged back by the sandbox's admin call, as paycore recorded it."""
    payment = paid(env, merchant, amount_minor)
    open_at_sandbox(env, payment)
    assert env.deliver() >= 1  # dispute.created
    [found] = disputes_of(env, payment["id"])
    return found


def four_disputes(env: Env) -> dict[str, str]:
    """Two lost by silence (a tok_disputed payment's, 5000, and one of 3000), one won with
    evidence (2000), one still open (4000): their dispute ids."""
    merchant = env.account()
    paid(env, merchant, 5000, token="tok_disputed")
    opened_at = later()
    assert env.sandbox.settle_due(opened_at) >= 1
    assert env.deliver(opened_at) >= 1
    won = disputed(env, merchant, 2000)
    body = {"text": "winning_evidence"}
    answered = env.client.post(f"/v1/disputes/{won['id']}/evidence", json=body, headers={"Idempotency-Key": "ev"})
    assert answered.status_code == 200, answered.text
    silent = disputed(env, merchant, 3000)
    decided_at = later() + LATER_US
    assert env.sandbox.settle_due(decided_at) >= 1
    assert env.deliver(decided_at) >= 1
    assert dispute(env, won["id"])["status"] == "won"
    past_the_window = later() + WINDOW_US
    assert env.sandbox.settle_due(past_the_window) >= 1  # the window passed with no answer: lost
    assert env.deliver(past_the_window) >= 1
    assert dispute(env, silent["id"])["status"] == "lost"
    still_open = disputed(env, merchant, 4000)
    assert still_open["status"] == "needs_response"
    return {"won": won["id"], "lost": silent["id"], "open": still_open["id"]}


def test_fees_of_every_chargeback_and_the_lost_amounts(env: Env) -> None:
    before = report(env)
    assert before["dispute_totals"] == [] and before["totals"] == []
    four_disputes(env)

    body = report(env)

    # Four fees (the won one's too: the sandbox keeps it) and the two lost amounts; the open
    # dispute's 4000 is not lost yet, the won one's 2000 came back.
    assert body["dispute_totals"] == [
        {
            "currency": "USD",
            "dispute_fees_minor": 4 * FEE_MINOR,
            "lost_chargebacks_minor": 5000 + 3000,
            "loss_minor": LOSS_MINOR,
            "disputes": 4,
        }
    ]
    assert body["data"] == [] and body["totals"] == []  # no payout lost anything
    assert all(type(value) is int for value in body["dispute_totals"][0].values() if value != "USD")


def test_the_range_currency_and_rail_filters(env: Env) -> None:
    four_disputes(env)
    today = dt.datetime.now(dt.UTC).date()
    day = dt.timedelta(days=1)
    assert report(env, **{"from": today.isoformat(), "to": today.isoformat()})["dispute_totals"][0]["disputes"] == 4
    assert report(env, to=(today - day).isoformat())["dispute_totals"] == []
    # Each part is dated by the day paycore booked it: the fees by their withdrawals, the
    # lost amount by the day paycore heard it was lost (today, whatever the sandbox's clock).
    assert report(env, **{"from": (today + day).isoformat()})["dispute_totals"] == []
    assert report(env, currency="EUR")["dispute_totals"] == []
    assert report(env, currency="USD")["dispute_totals"][0]["loss_minor"] == LOSS_MINOR
    assert report(env, rail="ach")["dispute_totals"] == []  # a card payment has no rail


def test_the_cli_and_the_month_figure_count_them(env: Env) -> None:
    four_disputes(env)
    environment = {"PAYCORE_DATABASE_URL": env.settings.database_url}
    result = CliRunner().invoke(cli, ["report", "losses", "--format", "json"], env=environment)
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert [(t["currency"], t["loss_minor"], t["disputes"]) for t in body["dispute_totals"]] == [("USD", LOSS_MINOR, 4)]
    exported = CliRunner().invoke(cli, ["report", "losses", "--format", "csv"], env=environment)
    assert exported.exit_code == 0, exported.output
    assert exported.stdout.splitlines()[1:] == []  # no payout row: the disputes are totals, on stderr
    assert "disputes on payments: loss USD 140.00 (fees 60.00, lost 80.00, 4 disputes)" in exported.stderr
    table = CliRunner().invoke(cli, ["report", "losses", "--tenant", "default"], env=environment)
    assert table.exit_code == 0, table.output
    assert "disputes on payments: loss USD 140.00 (fees 60.00, lost 80.00, 4 disputes)" in table.stdout
    with env.database.read() as connection:  # the console's "loss this month" is the same sum
        assert losses.totals(connection, tenant_id="default") == {"USD": LOSS_MINOR}
        assert losses.totals(connection, tenant_id=None, from_day=today_text()) == {"USD": LOSS_MINOR}


def today_text() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


def test_the_console_loss_page_shows_them(env: Env) -> None:
    """`/ops/losses` (local mode: open without signing in) has the disputes' totals beside the
    payouts', in major units, and none under a rail (a card payment has none)."""
    empty = env.client.get("/ops/losses")
    assert empty.status_code == 200, empty.text
    assert "No dispute fee or lost chargeback in the range" in _dispute_table(empty.text)
    four_disputes(env)

    table = _dispute_table(env.client.get("/ops/losses").text)

    assert "140.00 USD" in table and "60.00 USD" in table and "80.00 USD" in table  # loss, fees, lost
    assert '<a href="/ops/disputes?status=all">4</a>' in table
    assert "a card payment has no rail" in _dispute_table(env.client.get("/ops/losses", params={"rail": "ach"}).text)


def _dispute_table(text: str) -> str:
    return text.split('<table id="dispute-totals">', 1)[1].split("</table>", 1)[0]
