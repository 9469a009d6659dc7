"""The fixture of `reconcile_bench.py`: paycore's objects for one day and that day's settlement
report of exactly N lines, which names them.

THE BULK OF THE OBJECTS IS WRITTEN DIRECTLY, BYPASSING THE SERVICES: one `INSERT ... SELECT`
per table (PostgreSQL: from `generate_series`; SQLite: from a recursive CTE), shaped as the
services write them (same columns, statuses, request ids), without ledger transfers or audit
events, which a report line about a final object never reads. Going through the services
would take hours at a million lines (bench/loss_report_bench.py says the same of payouts).

THE OBJECTS THE REPORT RESOLVES ARE MADE BY THE SERVICES: payments, refunds and payouts left
`in_doubt` by a processor that never answers (`Unanswered` below), with their real pending
ledger transfers, holds and audit events, so that applying a line runs the same lifecycle code,
ledger postings included, as in production; `paycore.ledger.verify` is checked afterwards.

Line `n` (0-based) of the report is decided by `n % 1000` (its `slot`), so every block of
1,000 lines holds the same mix and the cost per line does not depend on N:

| slot | line | paycore holds | the engine |
|---|---|---|---|
| 0-99 | `refund` succeeded | the refund, succeeded, of a payment made 2 h before the day | matched |
| 100-149 | `payout` settled, fee 0 | the payout, settled (no bank fee booked) | matched |
| 150-199 | `charge` failed | the payment, failed | matched |
| 200 | `charge` succeeded, amount 1 less | the payment, succeeded | `amount_mismatch` |
| 201 | `charge` succeeded, `unknown_...` | nothing | `missing_in_paycore` |
| 202 | `charge` succeeded | the payment, failed | `status_mismatch` |
| 203 | `charge` succeeded (failed in one block of 10) | a payment `in_doubt` | resolved |
| 204 | `refund` succeeded | a refund `in_doubt` | resolved |
| 205 | `payout` settled | a payout `in_doubt` | resolved (through `sent`) |
| 206 | `charge` succeeded | the payment refunded by slot 204's refund, made today | matched |
| 207-999 | `charge` succeeded | the payment, succeeded | matched |

Every object whose money moved on the day has its one line (none is `missing_at_processor`, no
line is a `duplicate_line`), so the expected counts stay right when those checks are built.
Tenants: four (`bench-m0` .. `bench-m3`); currencies: EUR on every third line, else USD.
"""

from __future__ import annotations

import csv
import datetime as dt
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Connection, text

from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope
from paycore.kit.clock import now_us as clock_now_us
from paycore.ledger import service as ledger
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.lifecycle.policy import Policy
from paycore.payments import service as payments
from paycore.payments.types import NewPayment
from paycore.payouts import rounds as payout_rounds
from paycore.payouts import service as payouts
from paycore.payouts import states as payout_states
from paycore.payouts.types import NewPayout
from paycore.payouts.validation import Beneficiary
from paycore.processor.port import (
    SETTLEMENT_REPORT_COLUMNS,
    ChargeRequest,
    ChargeResult,
    PayoutRequest,
    PayoutResult,
    ProcessorUnreachable,
    RefundRequest,
    RefundResult,
)
from paycore.refunds import rounds as refund_rounds
from paycore.refunds import service as refunds
from paycore.refunds.service import NewRefund

BLOCK_LINES: Final = 1_000  # the mix repeats every BLOCK_LINES lines: N must be a multiple
LINES_MAX: Final = 10_000_000  # ids are padded to 8 digits; the day holds the lines 18 h apart
TENANTS: Final = tuple(f"bench-m{index}" for index in range(4))
CURRENCIES: Final = ("USD", "EUR")
SPREAD_US: Final = 18 * 3600 * 1_000_000  # the lines' times, from the day's midnight on

REFUNDS_END: Final = 100  # slots [0, 100): refunds
PAYOUTS_END: Final = 150  # [100, 150): payouts
FAILED_END: Final = 200  # [150, 200): failed charges
AMOUNT_OFF: Final = 200
UNKNOWN_CHARGE: Final = 201
STATUS_WRONG: Final = 202
DOUBT_PAYMENT: Final = 203
DOUBT_REFUND: Final = 204
DOUBT_PAYOUT: Final = 205
DOUBT_REFUND_PARENT: Final = 206
DOUBT_FAILED_EVERY: Final = 10  # one in-doubt payment in 10 is reported failed (its hold voided)

SERVICE_BATCH_MAX: Final = 100  # in-doubt objects per worker round
FUNDING_MINOR: Final = 10**14  # each payout source account's funding: never runs out
ACH = Beneficiary("Bench Beneficiary", routing_number="011000015", account_number="123456789")
SEPA = Beneficiary("Bench Beneficiary", iban="DE89370400440532013000", bic="COBADEFFXXX")


# ---------------------------------------------------------------------------- one line's facts


def slot_of(n: int) -> int:
    return n % BLOCK_LINES


def tenant_of(n: int) -> str:
    return TENANTS[(n + n // BLOCK_LINES) % len(TENANTS)]


def currency_of(n: int) -> str:
    return "EUR" if n % 3 == 0 else "USD"


def amount_of(n: int) -> int:
    return 1000 + (n * 7919) % 500_000


def charge_fee_minor(amount_minor: int) -> int:
    """The sandbox's fee of a succeeded charge (docs/sandbox.md, "The settlement report")."""
    return (amount_minor * 29 + 999) // 1000 + 30


def payout_fee_minor(currency: str) -> int:
    return 20 if currency == "EUR" else 25


def padded(n: int) -> str:
    return f"{n:08d}"


@dataclass(frozen=True)
class Expected:
    """What a run over the whole report must count."""

    lines: int
    breaks: dict[str, int]
    resolved: int
    payments_failed_by_report: int  # in-doubt payments the report says failed

    @property
    def matched(self) -> int:
        return self.lines - sum(self.breaks.values())


def expected(lines: int) -> Expected:
    blocks = lines // BLOCK_LINES
    breaks = {"amount_mismatch": blocks, "missing_in_paycore": blocks, "status_mismatch": blocks}
    failed = sum(1 for block in range(blocks) if _doubt_reported_failed(block))
    return Expected(lines, breaks, resolved=3 * blocks, payments_failed_by_report=failed)


def _doubt_reported_failed(block: int) -> bool:
    return block % DOUBT_FAILED_EVERY == DOUBT_FAILED_EVERY - 1


# ---------------------------------------------------------------------------- bulk SQL

_NUMBERS: Final = {
    "postgresql": "generate_series(CAST(0 AS BIGINT), CAST(:lines AS BIGINT) - 1) AS numbers(n)",
    "sqlite": "(WITH RECURSIVE numbers(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM numbers WHERE n < :lines - 1)"
    " SELECT n FROM numbers)",
}
_PAD: Final = {"postgresql": "lpad(CAST(n AS TEXT), 8, '0')", "sqlite": "printf('%08d', n)"}
# The same facts as the Python functions above, in SQL (integer division on both databases).
_TENANT_INDEX: Final = "((n + n / 1000) % 4)"
_CURRENCY: Final = "CASE WHEN n % 3 = 0 THEN 'EUR' ELSE 'USD' END"
_AMOUNT: Final = "(1000 + (n * 7919) % 500000)"
_CREATED: Final = "(:day_start_us + n * :step_us)"
_FAILED_SLOTS: Final = f"((slot >= {PAYOUTS_END} AND slot < {FAILED_END}) OR slot = {STATUS_WRONG})"
_PAYMENT_SLOTS: Final = (
    f"(slot < {REFUNDS_END} OR (slot >= {PAYOUTS_END} AND slot NOT IN "
    f"({UNKNOWN_CHARGE}, {DOUBT_PAYMENT}, {DOUBT_REFUND}, {DOUBT_PAYOUT}, {DOUBT_REFUND_PARENT})))"
)

_PAYMENTS: Final = """
INSERT INTO payments (tenant_id, id, idempotency_key, amount_minor, currency, source_type, source_token,
    destination_account_id, description, metadata, status, failure_code, processor_request_id,
    processor_reference, transfer_id, refunded_minor, attempts, next_attempt_at_us, claimed_by,
    claimed_until_us, in_doubt_since_us, created_at_us, updated_at_us)
SELECT {tenant}, 'pay_' || {pad}, 'bench:' || {pad}, {amount}, {currency}, 'card', 'tok_ok', {account}, NULL, '{{}}',
    CASE WHEN {failed} THEN 'failed' ELSE 'succeeded' END,
    CASE WHEN {failed} THEN 'card_declined' ELSE NULL END,
    'pay_' || {pad}, 'ch_' || {pad}, 'txn_bench_' || {pad},
    CASE WHEN slot < {refunds_end} THEN {amount} / 2 ELSE 0 END,
    1, NULL, NULL, NULL, NULL,
    CASE WHEN slot < {refunds_end} THEN :day_start_us - 7200000000 ELSE {created} END, {created}
FROM (SELECT n, n % 1000 AS slot FROM {numbers}) AS line
WHERE {payment_slots}
"""
_REFUNDS: Final = """
INSERT INTO refunds (tenant_id, id, payment_id, idempotency_key, amount_minor, currency, reason, status,
    failure_code, processor_request_id, processor_reference, transfer_id, attempts, next_attempt_at_us,
    claimed_by, claimed_until_us, in_doubt_since_us, created_at_us, updated_at_us)
SELECT {tenant}, 'rf_' || {pad}, 'pay_' || {pad}, NULL, {amount} / 2, {currency}, NULL, 'succeeded',
    NULL, 'rf_' || {pad}, 're_' || {pad}, 'txn_bench_rf_' || {pad}, 1, NULL, NULL, NULL, NULL,
    {created}, {created}
FROM (SELECT n, n % 1000 AS slot FROM {numbers}) AS line
WHERE slot < {refunds_end}
"""
_PAYOUTS: Final = """
INSERT INTO payouts (tenant_id, id, idempotency_key, amount_minor, currency, rail, source_account_id,
    beneficiary_name, iban, bic, routing_number, account_number, execute_on, metadata, status, failure_code,
    return_code, transfer_id, bank_reference, batch_id, attempts, next_attempt_at_us, claimed_by,
    claimed_until_us, in_doubt_since_us, sent_at_us, settled_at_us, returned_at_us, created_at_us, updated_at_us)
SELECT {tenant}, 'po_' || {pad}, NULL, {amount}, {currency},
    CASE WHEN n % 3 = 0 THEN 'sepa' ELSE 'ach' END, {source}, 'Bench Beneficiary',
    CASE WHEN n % 3 = 0 THEN 'DE89370400440532013000' ELSE NULL END,
    CASE WHEN n % 3 = 0 THEN 'COBADEFFXXX' ELSE NULL END,
    CASE WHEN n % 3 = 0 THEN NULL ELSE '011000015' END, CASE WHEN n % 3 = 0 THEN NULL ELSE '123456789' END,
    :day, '{{}}', '{settled}', NULL, NULL, 'txn_bench_po_' || {pad}, 'bpo_' || {pad}, 'bb_' || (n / 100),
    1, NULL, NULL, NULL, NULL, {created} - 3600000000, {created}, NULL, {created} - 7200000000, {created}
FROM (SELECT n, n % 1000 AS slot FROM {numbers}) AS line
WHERE slot >= {refunds_end} AND slot < {payouts_end}
"""


@dataclass(frozen=True)
class Accounts:
    """Per tenant and currency: the merchant's balance (payments' destination) and the funded
    source of its payouts."""

    merchant: dict[tuple[str, str], str]
    payout_source: dict[tuple[str, str], str]


def _account_case(ids: dict[tuple[str, str], str]) -> str:
    """SQL: the account id of line n's tenant and currency."""
    branches = " ".join(
        f"WHEN {index * 2 + (currency == 'EUR')} THEN '{ids[(tenant, currency)]}'"
        for index, tenant in enumerate(TENANTS)
        for currency in CURRENCIES
    )
    return f"CASE {_TENANT_INDEX} * 2 + CASE WHEN n % 3 = 0 THEN 1 ELSE 0 END {branches} END"


def bulk_insert(database: Database, accounts: Accounts, *, lines: int, day: str, day_start_us: int) -> None:
    """The final objects the report matches, one statement per table (see the module)."""
    formats = {
        "numbers": _NUMBERS[database.dialect],
        "pad": _PAD[database.dialect],
        "tenant": f"'bench-m' || {_TENANT_INDEX}",
        "currency": _CURRENCY,
        "amount": _AMOUNT,
        "created": _CREATED,
        "failed": _FAILED_SLOTS,
        "payment_slots": _PAYMENT_SLOTS,
        "account": _account_case(accounts.merchant),
        "source": _account_case(accounts.payout_source),
        "refunds_end": REFUNDS_END,
        "payouts_end": PAYOUTS_END,
        "settled": payout_states.SETTLED,
    }
    parameters = {"lines": lines, "day": day, "day_start_us": day_start_us, "step_us": SPREAD_US // lines}
    for statement in (_PAYMENTS, _REFUNDS, _PAYOUTS):
        sql = text(statement.format(**formats))
        database.transaction(lambda connection, sql=sql: connection.execute(sql, parameters))


def analyze(database: Database) -> None:
    """What autovacuum would do soon after such a load (it is off on this machine's server):
    statistics and the visibility map. SQLite: nothing (paycore never runs ANALYZE)."""
    if database.is_postgres:
        with database.engine.connect() as connection:
            connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")


# ---------------------------------------------------------------------------- accounts


def create_accounts(database: Database) -> Accounts:
    def work(connection: Connection) -> Accounts:
        now = clock_now_us()
        merchant: dict[tuple[str, str], str] = {}
        source: dict[tuple[str, str], str] = {}
        for tenant in TENANTS:
            for currency in CURRENCIES:
                merchant[(tenant, currency)] = _account(connection, tenant, f"merchant.{currency}", currency, "credit")
                source[(tenant, currency)] = _account(connection, tenant, f"seller.{currency}", currency, "credit")
                funding = _account(connection, tenant, f"funding.{currency}", currency, "debit")
                entries = (
                    EntrySpec(funding, "debit", FUNDING_MINOR),
                    EntrySpec(source[(tenant, currency)], "credit", FUNDING_MINOR),
                )
                ledger.create_transfer(connection, tenant, TransferSpec(entries=entries), now_us=now)
        return Accounts(merchant, source)

    return database.transaction(work)


def _account(connection: Connection, tenant: str, code: str, currency: str, normal: str) -> str:
    created = ledger.create_account(
        connection,
        tenant,
        code=code,
        currency=currency,
        normal_balance=normal,
        no_overdraft=False,
        metadata={},
        now_us=clock_now_us(),
    )
    return str(created.id)


# ---------------------------------------------------------------------------- in-doubt objects


class Unanswered:
    """A processor whose money calls never answer (`in_doubt`), except charges when
    `charges_succeed` (the refunded payments must be succeeded, with a processor reference)."""

    def __init__(self, *, charges_succeed: bool) -> None:
        self.charges_succeed = charges_succeed

    def charge(self, request: ChargeRequest) -> ChargeResult:
        if not self.charges_succeed:
            raise ProcessorUnreachable("bench: no answer")
        return ChargeResult(
            request.request_id, "succeeded", f"ch_{request.request_id}", request.amount_minor, request.currency
        )

    def get_charge(self, request_id: str) -> ChargeResult | None:
        return None

    def refund(self, request: RefundRequest) -> RefundResult:
        raise ProcessorUnreachable("bench: no answer")

    def get_refund(self, request_id: str) -> RefundResult | None:
        return None

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        raise ProcessorUnreachable("bench: no answer")

    def get_payout(self, request_id: str) -> PayoutResult | None:
        return None

    def settlement_report(self, day: str) -> Iterator[str]:
        raise ProcessorUnreachable("bench: no report")


@dataclass(frozen=True)
class Made:
    """An object made by the services, as its report line needs it."""

    kind: str  # payment | refund | payout
    id: str
    tenant_id: str
    amount_minor: int
    currency: str
    created_at_us: int


@dataclass
class InDoubt:
    """Per block: the in-doubt payment, refund and payout, and the refund's payment."""

    payments: list[Made] = field(default_factory=list)
    refunds: list[Made] = field(default_factory=list)
    payouts: list[Made] = field(default_factory=list)
    refund_parents: list[Made] = field(default_factory=list)


_POLICY: Final = Policy(
    attempts_max=10, backoff_ms=3_600_000, backoff_max_ms=3_600_000, lease_ms=60_000, batch_max=SERVICE_BATCH_MAX
)
_TIMINGS: Final = payments.PaymentTimings(processing_stale_ms=3_600_000, wait_ms=10_000, first_retry_ms=3_600_000)


def make_in_doubt(database: Database, accounts: Accounts, *, blocks: int) -> InDoubt:
    """Through the services: per block one payment, one refund (of a payment made succeeded
    first) and one payout left `in_doubt` by a processor that never answers."""
    silent, answering = Unanswered(charges_succeed=False), Unanswered(charges_succeed=True)
    lifecycle_log = logging.getLogger("paycore.lifecycle")
    level = lifecycle_log.level
    lifecycle_log.setLevel(logging.ERROR)  # "in doubt", "no answer": what the fixture means to cause
    try:
        return _make_in_doubt(database, accounts, blocks, silent, answering)
    finally:
        lifecycle_log.setLevel(level)


def _make_in_doubt(
    database: Database, accounts: Accounts, blocks: int, silent: Unanswered, answering: Unanswered
) -> InDoubt:
    for block in range(blocks):
        _pay(database, silent, accounts, block * BLOCK_LINES + DOUBT_PAYMENT, "doubt-payment")
        _pay(database, answering, accounts, block * BLOCK_LINES + DOUBT_REFUND_PARENT, "doubt-parent")
    parents = _made(database, "payment", "doubt-parent", blocks)
    database.transaction(lambda connection: _refund_each(connection, parents))
    database.transaction(lambda connection: _schedule_payouts(connection, accounts, blocks))
    _drain(lambda: refund_rounds.send_due(database, silent, _POLICY, "bench", actor="worker:send_refunds"))
    _drain(lambda: payout_rounds.queue_due(database, SERVICE_BATCH_MAX, actor="worker:queue_payouts"))
    _drain(lambda: payout_rounds.send_due(database, silent, _POLICY, "bench", actor="worker:send_payouts"))
    made = InDoubt(
        payments=_made(database, "payment", "doubt-payment", blocks),
        refunds=_made(database, "refund", "doubt-refund", blocks),
        payouts=_made(database, "payout", "doubt-payout", blocks),
        refund_parents=parents,
    )
    _check_in_doubt(database, made, blocks)
    return made


def _pay(database: Database, processor: Unanswered, accounts: Accounts, n: int, key_prefix: str) -> None:
    tenant, currency = tenant_of(n), currency_of(n)
    new = NewPayment(amount_of(n), currency, "card", "tok_ok", accounts.merchant[(tenant, currency)], None, {}, "local")
    scope = KeyScope(tenant, f"{key_prefix}-{padded(n // BLOCK_LINES)}", "bench", clock_now_us(), None)
    payments.create_payment(database, processor, scope, new, timings=_TIMINGS, render_refusal=render_refusal)


def _refund_each(connection: Connection, parents: list[Made]) -> None:
    for block, parent in enumerate(parents):
        new = NewRefund(parent.id, parent.amount_minor // 2, idempotency_key=f"doubt-refund-{padded(block)}")
        refunds.create_refund(connection, parent.tenant_id, new, actor="local", now_us=clock_now_us())


def _schedule_payouts(connection: Connection, accounts: Accounts, blocks: int) -> None:
    for block in range(blocks):
        n = block * BLOCK_LINES + DOUBT_PAYOUT
        tenant, currency = tenant_of(n), currency_of(n)
        rail, beneficiary = ("sepa", SEPA) if currency == "EUR" else ("ach", ACH)
        source = accounts.payout_source[(tenant, currency)]
        new = NewPayout(
            amount_of(n), currency, source, rail, beneficiary, idempotency_key=f"doubt-payout-{padded(block)}"
        )
        payouts.schedule(connection, tenant, new, actor="local", now_us=clock_now_us())


def _drain(round_of_work: Callable[[], int]) -> None:
    """Run a worker round until it claims nothing (bounded: the fixture holds no more)."""
    for _ in range(LINES_MAX // BLOCK_LINES):
        if round_of_work() == 0:
            return
    raise AssertionError("a worker round never ran dry")


_MADE_QUERIES: Final = {
    "payment": "SELECT id, tenant_id, amount_minor, currency, created_at_us, idempotency_key FROM payments"
    " WHERE idempotency_key LIKE :prefix",
    "refund": "SELECT id, tenant_id, amount_minor, currency, created_at_us, idempotency_key FROM refunds"
    " WHERE idempotency_key LIKE :prefix",
    "payout": "SELECT id, tenant_id, amount_minor, currency, created_at_us, idempotency_key FROM payouts"
    " WHERE idempotency_key LIKE :prefix",
}


def _made(database: Database, kind: str, key_prefix: str, blocks: int) -> list[Made]:
    """The objects made with keys `key_prefix-<block>`, in block order."""
    with database.read() as connection:
        rows = connection.execute(text(_MADE_QUERIES[kind]), {"prefix": f"{key_prefix}-%"}).all()
    rows = sorted(rows, key=lambda row: row.idempotency_key)
    assert len(rows) == blocks, f"{len(rows)} {kind}s made with keys {key_prefix}-*, expected {blocks}"
    return [Made(kind, row.id, row.tenant_id, row.amount_minor, row.currency, row.created_at_us) for row in rows]


def _check_in_doubt(database: Database, made: InDoubt, blocks: int) -> None:
    queries = {
        "payments": "SELECT COUNT(*) FROM payments WHERE status = 'in_doubt'",
        "refunds": "SELECT COUNT(*) FROM refunds WHERE status = 'in_doubt'",
        "payouts": "SELECT COUNT(*) FROM payouts WHERE status = 'in_doubt'",
        "refunded payments": "SELECT COUNT(*) FROM payments WHERE idempotency_key LIKE 'doubt-parent-%'"
        " AND status = 'succeeded'",
    }
    with database.read() as connection:
        for name, query in queries.items():
            found = connection.execute(text(query)).scalar_one()
            assert found == blocks, f"fixture: {found} {name} in the expected status, expected {blocks}"
    assert len(made.payments) == len(made.refunds) == len(made.payouts) == blocks


# ---------------------------------------------------------------------------- the report


def day_start_us(day: str) -> int:
    midnight = dt.datetime.combine(dt.date.fromisoformat(day), dt.time(), tzinfo=dt.UTC)
    return int(midnight.timestamp()) * 1_000_000


def rfc3339(at_us: int) -> str:
    moment = dt.datetime.fromtimestamp(at_us // 1_000_000, tz=dt.UTC).replace(microsecond=at_us % 1_000_000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_report(path: Path, *, lines: int, day: str, in_doubt: InDoubt) -> None:
    """The day's report, header and `lines` lines, written as it is made (never held whole)."""
    start_us, step_us = day_start_us(day), SPREAD_US // lines
    with path.open("w", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream, lineterminator="\r\n")
        writer.writerow(SETTLEMENT_REPORT_COLUMNS)
        for n in range(lines):
            writer.writerow(report_line(n, start_us + n * step_us, in_doubt))


def report_line(n: int, at_us: int, in_doubt: InDoubt) -> tuple[str | int, ...]:
    """Line n's fields (SETTLEMENT_REPORT_COLUMNS), as the table in the module says."""
    slot, block = slot_of(n), n // BLOCK_LINES
    if DOUBT_PAYMENT <= slot <= DOUBT_REFUND_PARENT:
        return _made_line(slot, block, in_doubt)
    tenant, currency, amount, number = tenant_of(n), currency_of(n), amount_of(n), padded(n)
    when = rfc3339(at_us)
    if slot < REFUNDS_END:
        return ("refund", f"rf_{number}", f"re_{number}", tenant, amount // 2, 0, currency, "succeeded", when, "", "")
    if slot < PAYOUTS_END:
        # The bulk-inserted payouts carry no bank fee adjustment: the report says the bank took none.
        batch = f"bb_{n // 100}"
        return ("payout", f"po_{number}", f"bpo_{number}", tenant, amount, 0, currency, "settled", when, batch, "")
    if slot < FAILED_END:
        return ("charge", f"pay_{number}", f"ch_{number}", tenant, amount, 0, currency, "failed", when, "", "")
    fee = charge_fee_minor(amount)
    request_id = f"unknown_{number}" if slot == UNKNOWN_CHARGE else f"pay_{number}"
    reported = amount - 1 if slot == AMOUNT_OFF else amount  # the fee stays the true amount's
    return ("charge", request_id, f"ch_{number}", tenant, reported, fee, currency, "succeeded", when, "", "")


def _made_line(slot: int, block: int, in_doubt: InDoubt) -> tuple[str | int, ...]:
    if slot == DOUBT_PAYMENT:
        item = in_doubt.payments[block]
        if _doubt_reported_failed(block):
            return _line("charge", item, f"ch_{item.id}", 0, "failed")
        return _line("charge", item, f"ch_{item.id}", charge_fee_minor(item.amount_minor), "succeeded")
    if slot == DOUBT_REFUND:
        item = in_doubt.refunds[block]
        return _line("refund", item, f"re_{item.id}", 0, "succeeded")
    if slot == DOUBT_PAYOUT:
        item = in_doubt.payouts[block]
        line = _line("payout", item, f"bpo_{item.id}", payout_fee_minor(item.currency), "settled")
        return (*line[:9], "bb_doubt", "")
    item = in_doubt.refund_parents[block]
    return _line("charge", item, f"ch_{item.id}", charge_fee_minor(item.amount_minor), "succeeded")


def _line(kind: str, item: Made, processor_id: str, fee_minor: int, status: str) -> tuple[str | int, ...]:
    when = rfc3339(item.created_at_us)
    return (
        kind,
        item.id,
        processor_id,
        item.tenant_id,
        item.amount_minor,
        fee_minor,
        item.currency,
        status,
        when,
        "",
        "",
    )


def first_day(path: Path) -> str:
    """The day the engine takes from the report: its first line's."""
    with path.open(encoding="utf-8", newline="") as stream:
        reader = csv.reader(stream)
        next(reader)
        return str(next(reader)[8][:10])


def describe(lines: int) -> dict[str, Any]:
    """The mix of a report of `lines` lines, for the results."""
    blocks = lines // BLOCK_LINES
    return {
        "refund lines": REFUNDS_END * blocks,
        "payout lines": (PAYOUTS_END - REFUNDS_END) * blocks,
        "failed charge lines": (FAILED_END - PAYOUTS_END) * blocks,
        "in-doubt objects resolved": 3 * blocks,
        "breaks": 3 * blocks,
    }
