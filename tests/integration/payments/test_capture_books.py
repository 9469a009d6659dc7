"""The books of authorizations (issue 40 point 3): `paycore ledger verify` and the invariant
checks (books against states, the system accounts' figures) cover every state of a manual
payment, and see a capture booked for another amount than the payment says."""

from __future__ import annotations

from sqlalchemy import text

from paycore.invariants import service as invariants
from paycore.ledger import service as ledger
from tests.integration.payments.capture_support import authorized, cancel, capture
from tests.integration.payments.conftest import Env


def problems(env: Env) -> list[str]:
    with env.database.read() as connection:
        return [*ledger.verify(connection).problems, *invariants.verify_books(connection)]


def test_every_state_of_an_authorization_keeps_the_books(env: Env) -> None:
    merchant = env.account()
    authorized(env, merchant, 1000)  # open
    assert capture(env, authorized(env, merchant, 5000)["id"], 3000).status_code == 200  # part
    assert capture(env, authorized(env, merchant, 2000)["id"]).status_code == 200  # all
    assert cancel(env, authorized(env, merchant, 4000)["id"]).status_code == 200
    env.pay(merchant, amount_minor=700)  # an automatic payment beside them
    assert problems(env) == []


def test_a_capture_booked_for_another_amount_is_found(env: Env) -> None:
    merchant = env.account()
    paid = authorized(env, merchant, 5000)
    assert capture(env, paid["id"], 3000).status_code == 200
    with env.database.engine.begin() as connection:  # the payment says more was captured
        connection.execute(text("UPDATE payments SET amount_captured_minor = 4000 WHERE id = :id"), {"id": paid["id"]})
    found = problems(env)
    assert any(line.startswith(f"payment_books_state: payment default/{paid['id']}") for line in found), found
    assert any("system_account_balance" in line and "processor.clearing" in line for line in found), found
