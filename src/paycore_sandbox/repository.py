"""The sandbox's SQL for charges, refunds, their settling and the settlement report: small
named statements, no rules. The webhook outbox's is `webhook_repository.py`, the bank rail's
`bank_repository.py`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    RowMapping,
    Select,
    String,
    Table,
    and_,
    cast,
    literal,
    literal_column,
    null,
    or_,
    select,
    union_all,
    update,
)

from paycore.db import driver
from paycore.db.engine import Database
from paycore.db.sql import insert_or_ignore
from paycore_sandbox.dispute_models import disputes, planned_disputes
from paycore_sandbox.faults import REPORT_FAULTS
from paycore_sandbox.models import (
    bank_batches,
    bank_payouts,
    charges,
    refunds,
    report_faults,
    webhook_attempts,
    webhooks,
)

# --- charges and refunds: on the driver (the statements of a charge, a refund, a dedupe) ---

_CHARGE_COLUMNS: Final = tuple(column.name for column in charges.columns)
_REFUND_COLUMNS: Final = tuple(column.name for column in refunds.columns)
_FIND_CHARGE = driver.statement(f"SELECT {', '.join(_CHARGE_COLUMNS)} FROM {charges.name} WHERE request_id = ?")
_FIND_CHARGE_BY_PROCESSOR_ID = driver.statement(
    f"SELECT {', '.join(_CHARGE_COLUMNS)} FROM {charges.name} WHERE processor_charge_id = ?"
)
_FIND_REFUND = driver.statement(f"SELECT {', '.join(_REFUND_COLUMNS)} FROM {refunds.name} WHERE request_id = ?")
# A captured authorization is refundable up to what was captured; any other charge up to its amount.
_RESERVE_REFUND = driver.statement(
    f"UPDATE {charges.name} SET refunded_minor = refunded_minor + ?, updated_at_us = ?"
    " WHERE request_id = ?"
    " AND refunded_minor + ? <= CASE WHEN status = 'captured' THEN captured_minor ELSE amount_minor END"
)


def first_row(table: Table, rows: Sequence[tuple[Any, ...]]) -> dict[str, Any] | None:
    """The first of `rows` (all of `table`'s columns, in order, from the driver) by column name,
    its booleans as bool (SQLite's driver gives 0 and 1); None if there is none."""
    if not rows:
        return None
    row = dict(zip(table.c.keys(), rows[0], strict=True))
    for name in _boolean_columns(table):
        row[name] = bool(row[name])
    return row


@cache
def _boolean_columns(table: Table) -> tuple[str, ...]:
    return tuple(column.name for column in table.columns if isinstance(column.type, Boolean))


def insert_charge(connection: Connection, values: Mapping[str, Any]) -> bool:
    """True when inserted; False when a charge with this request id exists (committed)."""
    return insert_or_ignore(connection, charges, values, ["request_id"])


def find_charge(connection: Connection, request_id: str) -> dict[str, Any] | None:
    return first_row(charges, driver.fetch(connection, _FIND_CHARGE, (request_id,)))


def find_charge_by_processor_id(connection: Connection, processor_charge_id: str) -> dict[str, Any] | None:
    return first_row(charges, driver.fetch(connection, _FIND_CHARGE_BY_PROCESSOR_ID, (processor_charge_id,)))


def reserve_refund(connection: Connection, charge_request_id: str, amount_minor: int, now_us: int) -> bool:
    """Add to the charge's refunded amount unless it would pass the charge's amount. One
    guarded UPDATE: concurrent refunds of one charge queue on its row and each sees the
    total the previous one committed."""
    params = (amount_minor, now_us, charge_request_id, amount_minor)
    return driver.execute(connection, _RESERVE_REFUND, params) == 1


def release_refund(connection: Connection, charge_request_id: str, amount_minor: int, now_us: int) -> None:
    statement = (
        update(charges)
        .where(charges.c.request_id == charge_request_id, charges.c.refunded_minor >= amount_minor)
        .values(refunded_minor=charges.c.refunded_minor - amount_minor, updated_at_us=now_us)
    )
    assert connection.execute(statement).rowcount == 1, "a refund releases what it reserved"


def insert_refund(connection: Connection, values: Mapping[str, Any]) -> bool:
    return insert_or_ignore(connection, refunds, values, ["request_id"])


def find_refund(connection: Connection, request_id: str) -> dict[str, Any] | None:
    return first_row(refunds, driver.fetch(connection, _FIND_REFUND, (request_id,)))


# --- the background work: is anything due? ---------------------------------------------------

# One read, by the indexes the steps use, before the background's write transactions: most
# rounds find nothing to settle, close or move, and each empty transaction took the write lock.
_ANYTHING_DUE = driver.statement(
    f"SELECT EXISTS (SELECT 1 FROM {charges.name} WHERE status = 'pending' AND settle_at_us <= ?)"
    f" OR EXISTS (SELECT 1 FROM {charges.name}"
    " WHERE status = 'requires_capture' AND authorization_expires_at_us <= ?)"
    f" OR EXISTS (SELECT 1 FROM {refunds.name} WHERE status = 'pending' AND settle_at_us <= ?)"
    f" OR EXISTS (SELECT 1 FROM {bank_batches.name} WHERE closed_at_us IS NULL AND closes_at_us <= ?)"
    f" OR EXISTS (SELECT 1 FROM {bank_payouts.name} WHERE next_step_at_us <= ?)"
    f" OR EXISTS (SELECT 1 FROM {disputes.name} WHERE next_step_at_us <= ?)"
    f" OR EXISTS (SELECT 1 FROM {planned_disputes.name} WHERE succeeded_at_us <= ?)"
)


def anything_due(database: Database, now_us: int, disputed_before_us: int) -> bool:
    """Whether a charge or refund is due to settle, an authorization to expire, a batch to close,
    a payout to move on, a dispute to be decided or closed, or a charge that succeeded before
    `disputed_before_us` to be disputed (tok_disputed)."""
    [(due,)] = database.peek(_ANYTHING_DUE, (now_us,) * 6 + (disputed_before_us,))
    return bool(due)


# --- pending charges and refunds reaching their final status --------------------------------


def due_to_settle(connection: Connection, object_type: str, now_us: int, limit: int) -> Sequence[RowMapping]:
    table = charges if object_type == "charge" else refunds
    statement = (
        select(table)
        .where(table.c.status == "pending", table.c.settle_at_us <= now_us)
        .order_by(table.c.settle_at_us, table.c.request_id)
        .limit(limit)
    )
    if connection.dialect.name == "postgresql":
        statement = statement.with_for_update(skip_locked=True)
    return connection.execute(statement).mappings().all()


def finish(connection: Connection, object_type: str, request_id: str, now_us: int) -> bool:
    """Move a pending row to its final status; False if another settler did it first."""
    table = charges if object_type == "charge" else refunds
    statement = (
        update(table)
        .where(table.c.request_id == request_id, table.c.status == "pending")
        .values(
            status=table.c.final_status,
            failure_code=table.c.final_failure_code,
            settle_at_us=None,
            updated_at_us=now_us,
        )
    )
    return connection.execute(statement).rowcount == 1


# --- the webhook outbox, for inspection (its own statements: webhook_repository.py) -------


def deliveries(connection: Connection, limit: int) -> Sequence[RowMapping]:
    """The outbox, oldest first (for inspection and tests)."""
    statement = select(webhooks).order_by(webhooks.c.created_at_us, webhooks.c.delivery_id).limit(limit)
    return connection.execute(statement).mappings().all()


def attempts_of(connection: Connection, delivery_id: str) -> Sequence[RowMapping]:
    statement = (
        select(webhook_attempts)
        .where(webhook_attempts.c.delivery_id == delivery_id)
        .order_by(webhook_attempts.c.attempt)
    )
    return connection.execute(statement).mappings().all()


# --- the settlement report ------------------------------------------------------------------


def insert_report_faults(connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    connection.execute(report_faults.insert(), [dict(row) for row in rows])


def settlement_rows(connection: Connection, start_us: int, end_us: int, rows_per_fetch: int) -> Iterator[RowMapping]:
    """What happened in [start_us, end_us), in time order, fetched in pages: charges and
    refunds by creation, captures of authorizations by capture, payouts by settlement
    (`payout`) and by return (`payout_return`).
    `fee_minor` is NULL for charges and refunds (the report computes theirs).

    The report faults are joined here, row by row on their primary key, so that memory stays
    bounded: a dropped line is left out, a duplicated one comes twice in a row (`copy_number`
    1 and 2, joined from a two-row table), the unknown charges are lines of their own, and each
    row carries `amount_delta_minor`, `fee_delta_minor` (NULL: right), `status_wrong`,
    `currency_wrong` and `amount_decimal` for the writer to apply."""
    combined = union_all(
        _created_rows(charges, "charge", charges.c.processor_charge_id, start_us, end_us),
        _capture_rows(start_us, end_us),
        _created_rows(refunds, "refund", refunds.c.processor_refund_id, start_us, end_us),
        _payout_rows("payout", start_us, end_us),
        _payout_rows("payout_return", start_us, end_us),
        _unknown_charge_rows(start_us, end_us),
        *(_dispute_rows(kind, start_us, end_us) for kind in DISPUTE_LINE_TYPES),
    ).subquery()
    joined: Any = combined
    fault: dict[str, Any] = {}
    for name in _JOINED_FAULTS:
        fault[name] = report_faults.alias(f"fault_{name.removeprefix('report_')}")
        joined = joined.outerjoin(
            fault[name],
            and_(
                fault[name].c.kind == combined.c.kind,
                fault[name].c.request_id == combined.c.request_id,
                fault[name].c.fault == name,
            ),
        )
    copies = union_all(select(literal_column("1").label("copy_number")), select(literal_column("2"))).subquery()
    duplicated = fault["report_duplicate_line"].c.fault.is_not(None)
    joined = joined.join(copies, or_(copies.c.copy_number == 1, duplicated))
    statement = (
        select(
            combined,
            fault["report_amount_delta"].c.value_minor.label("amount_delta_minor"),
            fault["report_fee_delta"].c.value_minor.label("fee_delta_minor"),
            fault["report_status"].c.fault.is_not(None).label("status_wrong"),
            fault["report_currency"].c.fault.is_not(None).label("currency_wrong"),
            fault["report_malformed_line"].c.fault.is_not(None).label("amount_decimal"),
            copies.c.copy_number,
        )
        .select_from(joined)
        .where(fault["report_drop_line"].c.fault.is_(None))
        .order_by(combined.c.at_us, combined.c.type, combined.c.request_id, copies.c.copy_number)
    )
    result = connection.execution_options(yield_per=rows_per_fetch).execute(statement)
    yield from result.mappings()


# The faults joined to each line (report_unknown_charge makes lines of its own instead).
_JOINED_FAULTS: Final = tuple(name for name in REPORT_FAULTS if name != "report_unknown_charge")


def _unknown_charge_rows(start_us: int, end_us: int) -> Select[Any]:
    """The lines of report_unknown_charge: a succeeded charge like the one of the call, with
    ids of its own. Their `kind` matches no fault, so no other fault touches them."""
    return (
        select(
            literal("charge").label("type"),
            report_faults.c.unknown_request_id.label("request_id"),
            report_faults.c.unknown_processor_id.label("processor_id"),
            charges.c.merchant_id,
            charges.c.amount_minor,
            cast(null(), BigInteger).label("fee_minor"),
            charges.c.currency,
            literal("succeeded").label("status"),
            charges.c.created_at_us.label("at_us"),
            cast(null(), String).label("batch_id"),
            cast(null(), String).label("code"),
            literal("unknown").label("kind"),
        )
        .select_from(
            report_faults.join(
                charges, and_(report_faults.c.kind == "charge", report_faults.c.request_id == charges.c.request_id)
            )
        )
        .where(
            report_faults.c.fault == "report_unknown_charge",
            charges.c.capture == "automatic",
            charges.c.created_at_us >= start_us,
            charges.c.created_at_us < end_us,
        )
    )


def _created_rows(table: Table, kind: str, processor_id: Any, start_us: int, end_us: int) -> Select[Any]:
    """Charges (automatic ones: an authorization has a line only when captured, `_capture_rows`)
    and refunds, by creation."""
    statement = select(
        literal(kind).label("type"),
        table.c.request_id,
        processor_id.label("processor_id"),
        table.c.merchant_id,
        table.c.amount_minor,
        cast(null(), BigInteger).label("fee_minor"),
        table.c.currency,
        table.c.status,
        table.c.created_at_us.label("at_us"),
        cast(null(), String).label("batch_id"),
        cast(null(), String).label("code"),
        literal(kind).label("kind"),
    ).where(and_(table.c.created_at_us >= start_us, table.c.created_at_us < end_us))
    return statement.where(charges.c.capture == "automatic") if table is charges else statement


def _capture_rows(start_us: int, end_us: int) -> Select[Any]:
    """Captured authorizations, by capture: a `charge` line of the captured amount, succeeded
    (as readers of the report know a charge that took money), dated when it was captured."""
    return select(
        literal("charge").label("type"),
        charges.c.request_id,
        charges.c.processor_charge_id.label("processor_id"),
        charges.c.merchant_id,
        charges.c.captured_minor.label("amount_minor"),
        cast(null(), BigInteger).label("fee_minor"),
        charges.c.currency,
        literal("succeeded").label("status"),
        charges.c.captured_at_us.label("at_us"),
        cast(null(), String).label("batch_id"),
        cast(null(), String).label("code"),
        literal("charge").label("kind"),
    ).where(and_(charges.c.captured_at_us >= start_us, charges.c.captured_at_us < end_us))


def _payout_rows(kind: str, start_us: int, end_us: int) -> Select[Any]:
    returned = kind == "payout_return"
    at_us = bank_payouts.c.returned_at_us if returned else bank_payouts.c.settled_at_us
    return select(
        literal(kind).label("type"),
        bank_payouts.c.request_id,
        bank_payouts.c.bank_payout_id.label("processor_id"),
        bank_payouts.c.merchant_id,
        (bank_payouts.c.return_amount_minor if returned else bank_payouts.c.amount_minor).label("amount_minor"),
        (bank_payouts.c.return_fee_minor if returned else bank_payouts.c.fee_minor).label("fee_minor"),
        bank_payouts.c.currency,
        literal("returned" if returned else "settled").label("status"),
        at_us.label("at_us"),
        cast(bank_payouts.c.batch_id, String).label("batch_id"),
        cast(bank_payouts.c.return_code if returned else null(), String).label("code"),
        literal("payout").label("kind"),
    ).where(and_(at_us >= start_us, at_us < end_us))


# A dispute's lines (dated by its events): the chargeback's withdrawal of the disputed amount
# and its fee (as two lines, the fee's amount in `amount_minor`), and a won one's reinstatement.
# `request_id` is the charge's, `processor_id` the dispute's, `code` its reason; their `kind`
# matches no report fault.
DISPUTE_LINE_TYPES: Final = ("dispute_withdrawal", "dispute_fee", "dispute_reinstatement")
DISPUTE_LINE_STATUSES: Final = {
    "dispute_withdrawal": "withdrawn",
    "dispute_fee": "charged",
    "dispute_reinstatement": "reinstated",
}


def _dispute_rows(kind: str, start_us: int, end_us: int) -> Select[Any]:
    at_us = disputes.c.reinstated_at_us if kind == "dispute_reinstatement" else disputes.c.withdrawn_at_us
    amount = disputes.c.fee_minor if kind == "dispute_fee" else disputes.c.amount_minor
    statement = select(
        literal(kind).label("type"),
        disputes.c.charge_request_id.label("request_id"),
        disputes.c.dispute_id.label("processor_id"),
        disputes.c.merchant_id,
        amount.label("amount_minor"),
        cast(literal(0), BigInteger).label("fee_minor"),
        disputes.c.currency,
        literal(DISPUTE_LINE_STATUSES[kind]).label("status"),
        at_us.label("at_us"),
        cast(null(), String).label("batch_id"),
        cast(disputes.c.reason, String).label("code"),
        literal("dispute").label("kind"),
    ).where(and_(at_us >= start_us, at_us < end_us))
    # A fee of 0 (settable) moves nothing: no line.
    return statement.where(disputes.c.fee_minor > 0) if kind == "dispute_fee" else statement
