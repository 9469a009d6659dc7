"""The processor's webhook that moves a payment, on PostgreSQL's one call (migration 0046's
`paycore_inbound_apply_payment`): what the function makes from the payment's row itself.

- The state event's snapshot is the bytes Python writes (`paycore.audit.rows.event_row`:
  `json.dumps(payment_object(moved), sort_keys=True, separators=(",", ":"))`), for a payment
  whose description and metadata hold what JSON escapes (quotes, backslashes, control
  characters, DEL, accents, characters past the BMP, the separators themselves): compared as
  text, not decoded, so a key out of order, a number written as another type, or an escape
  Python writes otherwise fails. On SQLite the same check holds the Python plan to the same.
- Its two helpers against Python's own functions, value by value: `paycore_rfc3339` against
  `kit.clock.to_rfc3339` (the 64-bit ends, year 1 and 9999 and past them, random times) and
  `paycore_json_string` against `json.dumps` (random strings over the whole of Unicode).
- The payments the function refuses (SQLSTATE PC013, nothing written) are those
  `move_plan.terminal_status` and the shape's planner refuse from a read: none, settled
  already, manual, a clock not past its last change; the reference path then decides.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from paycore.audit.rows import EventContext
from paycore.inbound import apply_object_plan, apply_object_repository, receive, service
from paycore.inbound.apply_payment import PAYMENT
from paycore.kit import ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.clock import to_rfc3339
from paycore.payments import service as payments
from paycore.payments.schemas import payment_object
from tests.integration.inbound.test_apply_data_plane import AMOUNT_MINOR, TOKENS, event_for
from tests.integration.inbound.test_receive_data_plane import crafted, references, signed, tenant_of
from tests.integration.payments.conftest import Env

__all__ = ["references"]  # the fixture

# What JSON escapes, in a description and in metadata keys and values (sorted by code point).
AWKWARD = 'q"uote \\back\nline\ttab \x01\x1f\x7f é 日本 😀 \u2028 \ufeff ", " ": "'
METADATA = {
    "a": AWKWARD,
    "Z": "",
    'k"ey': "\\",
    "é": "😀",
    "\uffff": "past",
    "😀": '", "',
    "sep": '": "x", "y',
}
TIMES_US = (0, 1, -1, 999_999, -999_999, 1_000_000, -1_000_000, 1_733_302_800_123_456, 2**63 - 1, -(2**63))
YEAR_ENDS_US = (-62_135_596_800_000_001, -62_135_596_800_000_000, 253_402_300_799_999_999, 253_402_300_800_000_000)
RANDOM_SAMPLES = 300


def waiting_awkward(env: Env, start: str) -> str:
    """A payment left `processing` or `in_doubt`, its description and metadata awkward."""
    response = env.client.post(
        "/v1/payments",
        json={
            "amount_minor": AMOUNT_MINOR,
            "currency": "USD",
            "source": {"type": "card", "token": TOKENS[start]},
            "destination_account": env.account(),
            "description": AWKWARD,
            "metadata": METADATA,
        },
        headers={"Idempotency-Key": f"awkward-{ids.new_ulid()}"},
    )
    assert response.status_code == 202 and response.json()["status"] == start, response.text
    return str(response.json()["id"])


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("start", ["processing", "in_doubt"])
@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_the_snapshot_is_the_bytes_python_writes(env: Env, start: str, outcome: str, references: list[str]) -> None:
    payment_id = waiting_awkward(env, start)
    assert receive.receive(env.database, *signed(env, event_for(env, payment_id, outcome))).result == "applied"
    assert references == [], "the data plane moved it"
    with env.database.read() as connection:
        moved = payments.MACHINE.find(connection, tenant_of(env.database, payment_id), payment_id)
        snapshot = connection.execute(
            text(
                "SELECT snapshot FROM events WHERE object_id = :p AND kind = 'state_change'"
                " ORDER BY object_sequence DESC LIMIT 1"
            ),
            {"p": payment_id},
        ).scalar_one()
    assert moved is not None and moved.status == outcome and moved.metadata == METADATA
    assert snapshot == json.dumps(payment_object(moved), sort_keys=True, separators=(",", ":"))


_NUMBERED = "FROM unnest(CAST(:v AS {})) WITH ORDINALITY AS u (value, n)"  # the values, in their order


def _one(env: Env, sql: str, value: Any) -> Any:
    with env.database.read() as connection:
        return connection.execute(text(sql), {"v": value}).scalar_one()


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_the_functions_times_are_pythons(env: Env) -> None:
    if not env.database.is_postgres:
        pytest.skip("PostgreSQL's function")
    drawn = random.Random(39)
    times = [*TIMES_US, *YEAR_ENDS_US, *(drawn.randint(-(2**63), 2**63 - 1) for _ in range(RANDOM_SAMPLES))]
    times += [drawn.randint(-(10**17), 10**17) for _ in range(RANDOM_SAMPLES)]
    rendered = _one(env, f"SELECT array_agg(paycore_rfc3339(value) ORDER BY n) {_NUMBERED.format('bigint[]')}", times)
    assert rendered == [to_rfc3339(time_us) for time_us in times]


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_the_functions_strings_are_pythons(env: Env) -> None:
    if not env.database.is_postgres:
        pytest.skip("PostgreSQL's function")
    drawn = random.Random(39)

    def character() -> str:  # any but NUL (PostgreSQL's text holds none) and a lone surrogate
        return chr(drawn.choice((drawn.randint(1, 127), drawn.randint(128, 0xD7FF), drawn.randint(0xE000, 0x10FFFF))))

    strings = ["", "plain", AWKWARD, *METADATA, *METADATA.values()]
    strings += ["".join(character() for _ in range(drawn.randint(0, 24))) for _ in range(RANDOM_SAMPLES)]
    numbered = _NUMBERED.format("text[]")
    encoded = _one(env, f"SELECT array_agg(paycore_json_string(value) ORDER BY n) {numbered}", strings)
    assert encoded == [json.dumps(value) for value in strings]
    assert _one(env, "SELECT paycore_json_string(:v)", None) == "null"


def _refused(env: Env, body: bytes, *, now_us: int | None = None) -> None:
    """The function refuses the plan with PC013, and the event is not stored."""
    event = service.verified_event(*signed(env, body))
    plan = apply_object_plan.plan_call(
        PAYMENT.planning,
        event,
        body.decode(),
        now_us=clock_now_us() if now_us is None else now_us,
        new_ids=PAYMENT.planning.new_ids(),
        audit_event_id=ids.new_id("evt"),
        context=EventContext.current(),
    )
    assert plan is not None
    with env.database.autocommit() as connection, pytest.raises(DBAPIError) as raised:
        apply_object_repository.apply_call(connection, PAYMENT.writing, plan)
    assert getattr(raised.value.orig, "sqlstate", None) == "PC013"
    assert _one(env, "SELECT count(*) FROM processor_webhooks WHERE event_id = :v", event.id) == 0


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
def test_the_function_refuses_what_the_read_refused(env: Env, references: list[str]) -> None:
    if not env.database.is_postgres:
        pytest.skip("PostgreSQL's function (SQLite reads the payment first, in the same transaction)")
    processing = waiting_awkward(env, "processing")
    tenant = tenant_of(env.database, processing)
    updated_at_us = int(_one(env, "SELECT updated_at_us FROM payments WHERE id = :v", processing))
    _refused(env, event_for(env, processing, "succeeded"), now_us=updated_at_us)  # a clock not past it
    _refused(env, crafted("pay_none", tenant))  # no such payment
    manual = env.pay(env.account(), token="tok_pending", amount_minor=AMOUNT_MINOR, capture="manual")
    assert manual.json()["status"] == "processing", manual.text
    _refused(env, event_for(env, manual.json()["id"], "succeeded"))  # an authorization
    assert receive.receive(env.database, *signed(env, event_for(env, processing, "succeeded"))).result == "applied"
    _refused(env, crafted(processing, tenant, type="charge.failed", data={"status": "failed"}))  # settled
    assert references == []
