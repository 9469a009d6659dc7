"""The refund ceiling and the refund's hold live with refunds (issue 30, point 3): `refunds/
ceiling.py` reserves and releases on the payment row, `refunds/money.py` writes the hold, and
the payments package knows nothing of refunds. Both databases."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit import ids
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore.payments import service as payments
from paycore.refunds import ceiling, money

TENANT = "t_ceiling"


def _paid(connection: Connection, amount_minor: int) -> tuple[str, str]:
    merchant = ledger.create_account(
        connection, TENANT, code="merchant", currency="USD", normal_balance="credit", no_overdraft=False,
        metadata={}, now_us=now_us(),
    ).id  # fmt: skip
    payment = payments.import_settled_payment(
        connection, TENANT, payment_id=ids.new_id("pay"), amount_minor=amount_minor, currency="USD",
        destination_account_id=merchant, now_us=now_us(),
    )  # fmt: skip
    return payment.id, merchant


def test_the_ceiling_reserves_up_to_what_was_paid_and_releases(database: Database) -> None:
    def work(connection: Connection) -> None:
        payment_id, _ = _paid(connection, 1_000)
        first = ceiling.reserve(connection, TENANT, payment_id, 600)
        assert first is not None and first.refunded_minor == 600
        assert ceiling.reserve(connection, TENANT, payment_id, 401) is None  # one minor unit too many
        assert ceiling.reserve(connection, TENANT, "pay_missing", 1) is None
        second = ceiling.reserve(connection, TENANT, payment_id, 400)
        assert second is not None and second.refunded_minor == 1_000
        ceiling.release(connection, TENANT, payment_id, 400)
        found = payments.MACHINE.find(connection, TENANT, payment_id)
        assert found is not None and found.refunded_minor == 600

    database.transaction(work)


def test_the_hold_moves_the_amount_from_the_destination_to_clearing_pending(database: Database) -> None:
    def work(connection: Connection) -> None:
        payment_id, merchant = _paid(connection, 1_000)
        payment = ceiling.reserve(connection, TENANT, payment_id, 250)
        assert payment is not None
        transfer_id = money.hold(connection, payment, "rf_1", 250, now_us=now_us())
        transfer = ledger.get_transfer(connection, TENANT, transfer_id)
        assert (transfer.kind, transfer.reference_type, transfer.reference_id) == ("pending", "refund", "rf_1")
        assert ledger.get_account(connection, TENANT, merchant).balance.available_minor == 750

    database.transaction(work)


def test_payments_know_nothing_of_the_refund_ceiling(repo_root: Path) -> None:
    """The rule's one home is refunds/: no function of payments reserves, releases or holds."""
    for name in ("service.py", "repository.py"):
        source = (repo_root / "src/paycore/payments" / name).read_text()
        for word in ("reserve_refund", "release_refund", "refund_hold", "refunded_minor +", "refunded_minor -"):
            assert word not in source, (name, word)
