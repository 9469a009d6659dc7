"""Helpers for the bank rail's tests: payout requests to the test accounts, a clock the test
moves by hand (so every step's timing is checked with explicit times, never with sleeps), and
the moments of the default schedule."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from schwifty import IBAN
from sqlalchemy import func, select

from paycore.kit import clock
from paycore.processor.port import PayoutRequest
from paycore_sandbox import Sandbox
from paycore_sandbox.models import bank_batches, bank_payouts, webhooks

ROUTING = "110000000"  # a valid ABA routing number (3*1 + 7*1 = 10)
SETTLES_ACH = "000123456789"
SETTLES_IBAN = "DE89370400440532013000"
START_US = clock.parse_rfc3339("2030-06-03T12:00:00Z")
MS_US = 1_000

# The default schedule (SandboxSettings), from the first payout's acceptance at START_US.
CLOSE_MS = 500
REJECT_MS = CLOSE_MS + 300
SETTLE_MS = CLOSE_MS + 1_000
RETURN_MS = SETTLE_MS + 1_000
LATE_RETURN_MS = SETTLE_MS + 3_000


def iban_ending(ending: str) -> str:
    """A valid German IBAN (bank 37040044) whose last four digits are `ending`."""
    return str(IBAN.generate("DE", bank_code="37040044", account_code="053201" + ending))


def ach(
    request_id: str, account_number: str | None = SETTLES_ACH, amount_minor: int = 10_000, **changes: Any
) -> PayoutRequest:
    values: dict[str, Any] = {
        "request_id": request_id,
        "merchant_id": "merchant_1",
        "amount_minor": amount_minor,
        "currency": "USD",
        "rail": "ach",
        "beneficiary_name": "Jane Doe",
        "routing_number": ROUTING,
        "account_number": account_number,
    }
    return PayoutRequest(**{**values, **changes})


def sepa(request_id: str, iban: str | None = SETTLES_IBAN, amount_minor: int = 10_000, **changes: Any) -> PayoutRequest:
    values: dict[str, Any] = {
        "request_id": request_id,
        "merchant_id": "merchant_1",
        "amount_minor": amount_minor,
        "currency": "EUR",
        "rail": "sepa",
        "beneficiary_name": "Zoë Müller",
        "iban": iban,
    }
    return PayoutRequest(**{**values, **changes})


@dataclass
class ManualClock:
    """`clock.now_us` for the sandbox (in-process and its HTTP server alike), set by the test."""

    now_us: int = START_US

    def at_ms(self, ms: int) -> int:
        """Set the clock `ms` after START_US; return that moment."""
        self.now_us = START_US + ms * MS_US
        return self.now_us


def install_clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    manual = ManualClock()
    monkeypatch.setattr(clock, "now_us", lambda: manual.now_us)
    return manual


def at_ms(ms: int) -> int:
    return START_US + ms * MS_US


def payout_events(sandbox: Sandbox) -> list[dict[str, Any]]:
    """The payout events in the outbox (one per delivery), in the order they are due."""
    statement = (
        select(webhooks.c.body)
        .where(webhooks.c.object_type == "payout")
        .order_by(webhooks.c.due_at_us, webhooks.c.created_at_us, webhooks.c.delivery_id)
    )
    with sandbox.database.read() as connection:
        return [json.loads(body) for body in connection.execute(statement).scalars()]


def count_rows(sandbox: Sandbox, table_name: str) -> int:
    table = {"payouts": bank_payouts, "batches": bank_batches, "webhooks": webhooks}[table_name]
    with sandbox.database.read() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())
