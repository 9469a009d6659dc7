"""The fixture of `console_pages_bench.py`: a month of a payments business, for the console's pages.

THE BULK OF THE OBJECTS IS WRITTEN DIRECTLY, BYPASSING THE SERVICES: one `INSERT ... SELECT`
per table and kind of row (PostgreSQL: from `generate_series`; SQLite: from a recursive CTE),
shaped as the services write them (same columns, statuses, ids, causes, actors; published state
changes with their `object_sequence` and `snapshot`), without ledger transfers, which no list or
queue reads (`bench/_reconcile_fixture.py` and `bench/loss_report_bench.py` do the same):

- `payments`: N (100,000) over 30 days up to 10 minutes ago, four tenants (50, 30, 10, 10%), EUR
  on every third: 94% succeeded, 5% failed (`card_declined`), 1% `in_doubt` (`in_doubt_since_us`
  set, 1-3 attempts, the next one in the future), 10 of the last 20 `processing`.
- their `events`: a birth state change (∅ → processing, `api_request`, sequence 1 and snapshot),
  a `processor.charge` call (answered; unreachable for the in-doubt) and the final state change
  (sequence 2 and snapshot); only the birth for the `processing` ones.
- `refunds`: one of every 33rd payment if it succeeded (about 2,850), a minute after it:
  succeeded, but every 60th `requires_approval` (asked by `operator:alice`), every 100th
  `in_doubt`, every 25th failed, every 200th pending; the payment's `refunded_minor` reserved
  (released for the failed). Their events: the birth (`refund_requested`), then a
  `processor.refund` call and the final state change unless still waiting for approval.
- `payouts`: P (2,000) over the same days: settled (stored `succeeded`), but every 40th sent,
  every 50th failed, every 100th `in_doubt`, the last 40 scheduled for tomorrow. Their events:
  the birth (`payout_scheduled`), then a `processor.send_payout` call and the final state change.
- `disputes`: one on every 100th succeeded payment, mixed statuses (`_console_disputes.py`).
- `reconciliation_runs`: one completed run per day (30); `reconciliation_breaks`: 10 per day
  (300), naming that day's payments (amount_mismatch, status_mismatch) or none
  (missing_in_paycore), a third of them resolved.

Ids are ULIDs as paycore makes them (`pay_` + 10 characters of the creation millisecond in
Crockford base32 + 16 more), so id order is time order, as in production.

THE OBJECTS WHOSE PAGES ARE OPENED ARE MADE BY THE SERVICES, after the bulk: the ledger accounts
(and each payout source's funding), a webhook endpoint for tenant `bench-m0` (so their published
events queue real deliveries; the bulk rows were inserted before it existed, so they queued
none), then in `bench-m0`: 20 payments through the in-process sandbox (succeeded, with their
ledger transfers), a refund of the first one sent to the sandbox (succeeded), a refund waiting
for approval, a payment left `in_doubt` by a processor that never answers, a payout sent to
the sandbox's bank, and a chargeback on the third payment (recorded as its webhook records it).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Final

from sqlalchemy import TextClause, text

import _console_disputes as disputes_fixture
import _reconcile_fixture as reconcile_fixture
from _reconcile_fixture import ACH, Accounts, Unanswered
from paycore.db.engine import Database
from paycore.http.errors import render_refusal
from paycore.idempotency.service import KeyScope
from paycore.keyring import Keyring
from paycore.kit.clock import DAY_US
from paycore.kit.clock import now_us as clock_now_us
from paycore.payments import service as payments
from paycore.payments.types import NewPayment
from paycore.payouts import rounds as payout_rounds
from paycore.payouts import service as payouts
from paycore.payouts.types import NewPayout
from paycore.processor.port import Processor
from paycore.refunds import rounds as refund_rounds
from paycore.refunds import service as refunds
from paycore.refunds.service import NewRefund
from paycore.webhooks import service as webhooks

TENANTS: Final = reconcile_fixture.TENANTS  # bench-m0 .. bench-m3 (their accounts: create_accounts)
DAYS: Final = 30
BREAKS_PER_DAY: Final = 10
REAL_PAYMENTS: Final = 20
_SPAN_END_US: Final = 600 * 1_000_000  # the newest bulk row: 10 minutes before the build
_B32: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

# ---------------------------------------------------------------------------- SQL pieces

_NUMBERS: Final = {
    "postgresql": "generate_series(CAST(0 AS BIGINT), CAST(:count AS BIGINT) - 1) AS numbers(n)",
    "sqlite": "(WITH RECURSIVE numbers(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM numbers WHERE n < :count - 1)"
    " SELECT n FROM numbers)",
}


def _pad(dialect: str, value: str, width: int) -> str:
    """SQL: the integer `value` as `width` decimal digits (valid Crockford base32 characters)."""
    if dialect == "postgresql":
        return f"lpad(CAST(({value}) AS TEXT), {width}, '0')"
    return f"printf('%0{width}d', ({value}))"


def _rfc3339(dialect: str, us: str) -> str:
    """SQL: the RFC 3339 time (microseconds, Z) of the microsecond value `us`, as the API writes it."""
    if dialect == "postgresql":
        seconds = f"to_char(to_timestamp(({us}) / 1000000) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS')"
        return f"({seconds} || '.' || lpad(CAST(({us}) % 1000000 AS TEXT), 6, '0') || 'Z')"
    seconds = f"strftime('%Y-%m-%dT%H:%M:%S', ({us}) / 1000000, 'unixepoch')"
    return f"({seconds} || '.' || printf('%06d', ({us}) % 1000000) || 'Z')"


def _ulid_time(us: str) -> str:
    """SQL: the 10 Crockford base32 characters of a ULID made at microsecond `us` (its millisecond)."""
    ms = f"(({us}) / 1000)"
    return " || ".join(f"substr('{_B32}', CAST(({ms} >> {5 * k}) & 31 AS INTEGER) + 1, 1)" for k in range(9, -1, -1))


def _day(dialect: str, us: str) -> str:
    if dialect == "postgresql":
        return f"to_char(to_timestamp(({us}) / 1000000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"
    return f"strftime('%Y-%m-%d', ({us}) / 1000000, 'unixepoch')"


def _tenant_index(n: str = "n") -> str:
    """SQL: object n's tenant (50/30/10/10%), by a spread of n independent of its residues
    (statuses use n % 20, n % 100, ...)."""
    spread = f"((({n}) * 48271) % 2147483647 % 10)"
    return f"(CASE WHEN {spread} < 5 THEN 0 WHEN {spread} < 8 THEN 1 WHEN {spread} = 8 THEN 2 ELSE 3 END)"


_CURRENCY: Final = "(CASE WHEN n % 3 = 0 THEN 'EUR' ELSE 'USD' END)"


def _account_case(ids: dict[tuple[str, str], str]) -> str:
    branches = " ".join(
        f"WHEN {index * 2 + (currency == 'EUR')} THEN '{ids[(tenant, currency)]}'"
        for index, tenant in enumerate(TENANTS)
        for currency in ("USD", "EUR")
    )
    return f"(CASE {_tenant_index()} * 2 + CASE WHEN n % 3 = 0 THEN 1 ELSE 0 END {branches} END)"


# Payment n: its facts as one row (the FROM of every payment statement below).
_PAYMENT_ROWS: Final = """
(SELECT n, tenant_id, created, amount, currency, account, status, uid, 'pay_' || uid AS id,
        CASE WHEN refund_slot = 1 AND status = 'succeeded' THEN 1 ELSE 0 END AS refunded,
        CASE WHEN (n / 33) % 60 = 7 THEN 'requires_approval'
             WHEN (n / 33) % 100 = 13 THEN 'in_doubt'
             WHEN (n / 33) % 25 = 3 THEN 'failed'
             WHEN (n / 33) % 200 = 17 THEN 'pending'
             ELSE 'succeeded' END AS refund_status
 FROM (SELECT n, 'bench-m' || {tenant_index} AS tenant_id, :start_us + n * :step_us AS created,
              (100 + (n * 7919) % 200000) AS amount, {currency} AS currency, {account} AS account,
              CASE WHEN n >= :count - 20 AND n % 2 = 0 THEN 'processing'
                   WHEN n % 100 = 37 THEN 'in_doubt'
                   WHEN n % 20 = 3 THEN 'failed'
                   ELSE 'succeeded' END AS status,
              CASE WHEN n % 33 = 5 THEN 1 ELSE 0 END AS refund_slot,
              {ulid_created} || {pad16} AS uid
       FROM {numbers}) AS facts) AS p
"""

_PAYMENTS: Final = """
INSERT INTO payments (tenant_id, id, idempotency_key, amount_minor, currency, source_type, source_token,
    destination_account_id, description, metadata, status, failure_code, processor_request_id,
    processor_reference, transfer_id, refunded_minor, attempts, next_attempt_at_us, claimed_by,
    claimed_until_us, in_doubt_since_us, created_at_us, updated_at_us)
SELECT tenant_id, id, 'order-' || uid, amount, currency, 'card', 'tok_ok', account, NULL, '{{}}', status,
    CASE WHEN status = 'failed' THEN 'card_declined' ELSE NULL END,
    id, CASE WHEN status IN ('succeeded', 'failed') THEN 'ch_' || uid ELSE NULL END, 'txn_' || uid,
    CASE WHEN refunded = 1 AND refund_status <> 'failed' THEN amount / 2 ELSE 0 END,
    CASE WHEN status = 'in_doubt' THEN 1 + n % 3 ELSE 0 END,
    CASE WHEN status = 'in_doubt' THEN :now_us + 3600000000 + n
         WHEN status = 'processing' THEN created + 60000000 ELSE NULL END,
    NULL, NULL,
    CASE WHEN status = 'in_doubt' THEN created + 10000000 ELSE NULL END,
    created, CASE WHEN status = 'processing' THEN created ELSE created + 800000 END
FROM {rows}
"""

_SNAPSHOT_PAYMENT: Final = (
    '\'{{"amount_minor":\' || amount || \',"created_at":"\' || {created_at} || \'","currency":"\' || currency'
    ' || \'","description":null,"destination_account":"\' || account || \'","failure_code":\''
    ' || {failure_code} || \',"id":"\' || id || \'","metadata":{{}},"object":"payment","processor_reference":\''
    ' || {reference} || \',"refundable_minor":\' || {refundable} || \',"refunded_minor":0,"source":{{"type":"card"}},'
    '"status":"\' || {status} || \'","updated_at":"\' || {updated_at} || \'"}}\''
)

_EVENT_COLUMNS: Final = (
    "INSERT INTO events (tenant_id, id, kind, type, object_type, object_id, from_state, to_state, cause, actor,"
    " data, object_sequence, snapshot, created_at_us)"
)

_PAYMENT_BIRTHS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_created} || {pad15} || '1', 'state_change', 'payment.processing', 'payment', id,
    NULL, 'processing', 'api_request', 'api_key:key_bench' || substr(tenant_id, 8),
    '{{"request_id":"req_' || uid || '"}}', 1, {snapshot}, created
FROM {rows}
"""
)

_PAYMENT_CALLS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_answered} || {pad15} || '2', 'processor_call', 'processor.charge', 'payment', id,
    NULL, NULL, CASE WHEN status = 'in_doubt' THEN 'unreachable' ELSE 'answered' END,
    'api_key:key_bench' || substr(tenant_id, 8),
    '{{"latency_ms":' || (300 + n % 500) || ',"request":{{"amount_minor":' || amount || ',"currency":"' || currency
        || '","description":null,"merchant_id":"' || tenant_id || '","request_id":"' || id
        || '","token_last4":"k_ok"}},"request_id":"req_' || uid || '","response":'
        || CASE WHEN status = 'in_doubt'
                THEN '{{"error":"ProcessorUnreachable","message":"timed out","outcome":"unreachable"}}'
                ELSE '{{"amount_minor":' || amount || ',"currency":"' || currency || '","failure_code":'
                     || CASE WHEN status = 'failed' THEN '"card_declined"' ELSE 'null' END
                     || ',"outcome":"answered","processor_charge_id":"ch_' || uid || '","request_id":"' || id
                     || '","status":"' || status || '"}}' END
        || '}}',
    NULL, NULL, created + 800000
FROM {rows}
WHERE status <> 'processing'
"""
)

_PAYMENT_FINALS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_answered} || {pad15} || '3', 'state_change', 'payment.' || status, 'payment', id,
    'processing', status, CASE WHEN status = 'in_doubt' THEN 'processor_unreachable' ELSE 'processor_answer' END,
    'api_key:key_bench' || substr(tenant_id, 8), '{{"request_id":"req_' || uid || '"}}', 2, {snapshot},
    created + 800000
FROM {rows}
WHERE status <> 'processing'
"""
)

# Refund of payment n (a succeeded one with n % 33 = 5), made a minute after it.
_REFUND_ROWS: Final = """
(SELECT n, tenant_id, id AS payment_id, amount / 2 AS amount, currency, created + 60000000 AS created,
        {ulid_refund} || {pad16} AS uid, refund_status AS status,
        CASE WHEN refund_status = 'requires_approval' THEN 'requires_approval' ELSE 'pending' END AS birth
 FROM {payments} WHERE refunded = 1) AS r
"""

_REFUNDS: Final = """
INSERT INTO refunds (tenant_id, id, payment_id, idempotency_key, amount_minor, currency, reason, status,
    failure_code, processor_request_id, processor_reference, transfer_id, attempts, next_attempt_at_us,
    claimed_by, claimed_until_us, in_doubt_since_us, created_at_us, updated_at_us)
SELECT tenant_id, 'rf_' || uid, payment_id, 'refund-' || uid, amount, currency, NULL, status,
    CASE WHEN status = 'failed' THEN 'charge_disputed' ELSE NULL END,
    'rf_' || uid, CASE WHEN status IN ('succeeded', 'failed') THEN 're_' || uid ELSE NULL END,
    CASE WHEN status = 'requires_approval' THEN NULL ELSE 'txn_' || uid END,
    CASE WHEN status IN ('succeeded', 'failed') THEN 1 WHEN status = 'in_doubt' THEN 2 ELSE 0 END,
    CASE WHEN status IN ('in_doubt', 'pending') THEN :now_us + 3600000000 + n ELSE NULL END,
    NULL, NULL, CASE WHEN status = 'in_doubt' THEN created + 10000000 ELSE NULL END,
    created, CASE WHEN status = 'requires_approval' THEN created ELSE created + 900000 END
FROM {rows}
"""

_REFUND_BIRTHS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_refund} || {pad15} || '4', 'state_change',
    'refund.' || birth, 'refund', 'rf_' || uid, NULL, birth, 'refund_requested',
    CASE WHEN status = 'requires_approval' THEN 'operator:alice' ELSE 'api_key:key_bench' || substr(tenant_id, 8) END,
    '{{"request_id":"req_' || uid || '"}}', 1,
    '{{"amount_minor":' || amount || ',"created_at":"' || {created_at} || '","currency":"' || currency
        || '","failure_code":null,"id":"rf_' || uid || '","object":"refund","payment":"' || payment_id
        || '","reason":null,"status":"' || birth || '"}}',
    created
FROM {rows}
"""
)

_REFUND_CALLS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_sent} || {pad15} || '5', 'processor_call', 'processor.refund', 'refund', 'rf_' || uid,
    NULL, NULL, CASE WHEN status = 'in_doubt' THEN 'unreachable' ELSE 'answered' END, 'worker:send_refunds',
    '{{"latency_ms":' || (200 + n % 400) || ',"request":{{"amount_minor":' || amount || ',"currency":"' || currency
        || '","request_id":"rf_' || uid || '"}},"response":{{"outcome":"'
        || CASE WHEN status = 'in_doubt' THEN 'unreachable' ELSE 'answered' END || '"}}}}',
    NULL, NULL, created + 900000
FROM {rows}
WHERE status IN ('succeeded', 'failed', 'in_doubt')
"""
)

_REFUND_FINALS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_sent} || {pad15} || '6', 'state_change', 'refund.' || status, 'refund', 'rf_' || uid,
    'processing', status, CASE WHEN status = 'in_doubt' THEN 'processor_unreachable' ELSE 'processor_answer' END,
    'worker:send_refunds', '{{}}', 2,
    '{{"amount_minor":' || amount || ',"currency":"' || currency || '","id":"rf_' || uid
        || '","object":"refund","payment":"' || payment_id || '","status":"' || status || '"}}',
    created + 900000
FROM {rows}
WHERE status IN ('succeeded', 'failed', 'in_doubt')
"""
)

_PAYOUT_ROWS: Final = """
(SELECT n, tenant_id, created, amount, currency, source, uid, status,
        CASE WHEN status = 'scheduled' THEN {tomorrow} ELSE {execute_day} END AS execute_on
 FROM (SELECT n, 'bench-m' || {tenant_index} AS tenant_id, :start_us + n * :payout_step_us AS created,
              (5000 + (n * 104729) % 2000000) AS amount, {currency} AS currency, {source} AS source,
              {ulid_payout} || {pad16} AS uid,
              CASE WHEN n >= :payouts - 40 THEN 'scheduled'
                   WHEN n % 100 = 21 THEN 'in_doubt'
                   WHEN n % 50 = 7 THEN 'failed'
                   WHEN n % 40 = 9 THEN 'sent'
                   ELSE 'succeeded' END AS status
       FROM {numbers}) AS facts) AS po
"""

_PAYOUTS: Final = """
INSERT INTO payouts (tenant_id, id, idempotency_key, amount_minor, currency, rail, source_account_id,
    beneficiary_name, iban, bic, routing_number, account_number, execute_on, metadata, status, failure_code,
    return_code, transfer_id, bank_reference, batch_id, attempts, next_attempt_at_us, claimed_by,
    claimed_until_us, in_doubt_since_us, sent_at_us, settled_at_us, returned_at_us, created_at_us, updated_at_us)
SELECT tenant_id, 'po_' || uid, 'payout-' || uid, amount, currency,
    CASE WHEN currency = 'EUR' THEN 'sepa' ELSE 'ach' END, source, 'Bench Beneficiary',
    CASE WHEN currency = 'EUR' THEN 'DE89370400440532013000' ELSE NULL END,
    CASE WHEN currency = 'EUR' THEN 'COBADEFFXXX' ELSE NULL END,
    CASE WHEN currency = 'EUR' THEN NULL ELSE '011000015' END,
    CASE WHEN currency = 'EUR' THEN NULL ELSE '123456789' END,
    execute_on, '{{}}', status, CASE WHEN status = 'failed' THEN 'account_closed' ELSE NULL END, NULL,
    'txn_' || uid, CASE WHEN status IN ('sent', 'succeeded') THEN 'bpo_' || uid ELSE NULL END,
    CASE WHEN status IN ('sent', 'succeeded') THEN 'bb_' || execute_on ELSE NULL END,
    CASE WHEN status = 'scheduled' THEN 0 ELSE 1 END,
    CASE WHEN status IN ('in_doubt', 'sent') THEN :now_us + 3600000000 + n ELSE NULL END, NULL, NULL,
    CASE WHEN status = 'in_doubt' THEN created + 10000000 ELSE NULL END,
    CASE WHEN status IN ('sent', 'succeeded') THEN created + 1000000 ELSE NULL END,
    CASE WHEN status = 'succeeded' THEN created + 86400000000 ELSE NULL END, NULL,
    created, CASE WHEN status = 'scheduled' THEN created ELSE created + 1000000 END
FROM {rows}
"""

_PAYOUT_BIRTHS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_payout} || {pad15} || '7', 'state_change', 'payout.scheduled', 'payout', 'po_' || uid,
    NULL, 'scheduled', 'payout_scheduled', 'api_key:key_bench' || substr(tenant_id, 8),
    '{{"execute_on":"' || execute_on || '","transfer_id":"txn_' || uid || '"}}', 1,
    '{{"amount_minor":' || amount || ',"currency":"' || currency || '","id":"po_' || uid
        || '","object":"payout","status":"scheduled"}}',
    created
FROM {rows}
"""
)

_PAYOUT_CALLS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_payout_sent} || {pad15} || '8', 'processor_call', 'processor.send_payout', 'payout',
    'po_' || uid, NULL, NULL, CASE WHEN status = 'in_doubt' THEN 'unreachable' ELSE 'answered' END,
    'worker:send_payouts',
    '{{"attempt":1,"latency_ms":' || (100 + n % 300) || ',"request":{{"amount_minor":' || amount
        || ',"request_id":"po_' || uid || '"}},"response":{{"outcome":"'
        || CASE WHEN status = 'in_doubt' THEN 'unreachable' ELSE 'answered' END || '"}}}}',
    NULL, NULL, created + 1000000
FROM {rows}
WHERE status <> 'scheduled'
"""
)

_PAYOUT_FINALS: Final = (
    _EVENT_COLUMNS
    + """
SELECT tenant_id, 'evt_' || {ulid_payout_sent} || {pad15} || '9', 'state_change', 'payout.'
        || CASE WHEN status = 'succeeded' THEN 'settled' ELSE status END, 'payout', 'po_' || uid,
    'processing', status, 'bank_answer', 'worker:send_payouts', '{{}}', 2,
    '{{"amount_minor":' || amount || ',"currency":"' || currency || '","id":"po_' || uid
        || '","object":"payout","status":"' || CASE WHEN status = 'succeeded' THEN 'settled' ELSE status END || '"}}',
    created + 1000000
FROM {rows}
WHERE status <> 'scheduled'
"""
)

_RUNS: Final = """
INSERT INTO reconciliation_runs (tenant_id, id, day, source, report_sha256, status, lines_read, matched,
    breaks_found, resolved, created_at_us, finished_at_us)
SELECT '*', 'rcn_' || {ulid_run} || {pad16}, {run_day}, 'processor', 'bench' || n, 'completed',
    :per_day, :per_day - 10, 10, 0, {run_at}, {run_at} + 40000000
FROM {numbers}
"""

# Break b: of day b / 10 (that day's run), naming the day's payment m (b % 10 = 9: none).
_BREAKS: Final = """
INSERT INTO reconciliation_breaks (tenant_id, id, run_id, day, type, status, finding_key, object_type,
    object_id, object_status, line_number, line, detail, resolution, note, resolved_by, resolved_at_us,
    created_at_us, seen_run_id)
SELECT tenant_id, 'brk_' || {ulid_found} || {pad_b}, run_id, day, type,
    CASE WHEN b % 3 = 0 THEN 'resolved' ELSE 'open' END,
    type || ':charge:' || CASE WHEN type = 'missing_in_paycore' THEN 'unknown_' || b ELSE payment_id END,
    CASE WHEN type = 'missing_in_paycore' THEN NULL ELSE 'payment' END,
    CASE WHEN type = 'missing_in_paycore' THEN NULL ELSE payment_id END,
    CASE WHEN type = 'missing_in_paycore' THEN NULL ELSE 'succeeded' END,
    1 + b % 10 * 97,
    '["charge","' || payment_id || '","ch_x","' || tenant_id || '","999","30","USD","succeeded","' || day
        || 'T12:00:00.000000Z","",""]',
    CASE WHEN type = 'amount_mismatch' THEN 'the report says 999, paycore holds ' || amount_minor
         WHEN type = 'status_mismatch' THEN 'the report says succeeded, paycore holds failed'
         ELSE 'no such charge in paycore' END,
    CASE WHEN b % 3 = 0 THEN 'accepted' ELSE NULL END, NULL,
    CASE WHEN b % 3 = 0 THEN 'operator:alice' ELSE NULL END,
    CASE WHEN b % 3 = 0 THEN found_at + 86400000000 ELSE NULL END,
    found_at, run_id
FROM (SELECT b, payments.tenant_id, payments.id AS payment_id, payments.amount_minor, runs.id AS run_id, runs.day,
             runs.created_at_us + 1000000 + b % 10 AS found_at,
             CASE WHEN b % 10 = 9 THEN 'missing_in_paycore' WHEN b % 2 = 0 THEN 'amount_mismatch'
                  ELSE 'status_mismatch' END AS type
      FROM (SELECT n AS b, (n / 10) * :per_day + (n % 10) * 20 + 1 AS m, n / 10 AS d FROM {numbers}) AS pick
      JOIN payments ON payments.tenant_id = 'bench-m' || {tenant_of_m} AND payments.id = {payment_of_m}
      JOIN reconciliation_runs AS runs ON runs.tenant_id = '*' AND runs.id = {run_of_d}) AS found
"""


# ---------------------------------------------------------------------------- the build


@dataclass(frozen=True)
class Made:
    """What the timing needs to open pages: ids made by the services and ids of the bulk."""

    payment_id: str  # a service-made payment (ledger transfer, a refund, webhook deliveries)
    refund_id: str  # its refund, succeeded at the sandbox
    approval_refund_id: str  # a refund waiting for approval
    in_doubt_payment_id: str  # made by the services: the newest in doubt
    oldest_in_doubt_payment_id: str  # the first row of the in-doubt queue
    payout_id: str
    account_id: str  # the merchant account of the service-made payments (its statement: /ops/ledger/accounts/...)
    bulk_payment_id: str  # a bulk payment in the middle of the month
    bulk_processor_reference: str
    break_id: str  # an open break naming a payment
    tenant: str
    day: str  # a day in the middle of the month (the date filter)
    dispute_id: str  # a chargeback made by the services on a service-made payment
    disputes: int  # how many disputes in all (`_console_disputes.py`)


def build(database: Database, processor: Processor, *, payments_count: int, payouts_count: int) -> Made:
    now = clock_now_us()
    start = now - _SPAN_END_US - DAYS * DAY_US
    step = DAYS * DAY_US // payments_count
    accounts = reconcile_fixture.create_accounts(database)
    _bulk(database, accounts, now_us=now, start_us=start, step_us=step, payments=payments_count, payouts=payouts_count)
    bulk_disputes = disputes_fixture.bulk(database)
    reconcile_fixture.analyze(database)
    made = _by_services(database, processor, accounts)
    middle = payments_count // 2 + 1  # n % 20 = 1: succeeded
    with database.read() as connection:
        bulk = connection.execute(
            text("SELECT id, processor_reference, created_at_us FROM payments WHERE idempotency_key LIKE :key"),
            {"key": f"order-%{middle:016d}"},
        ).one()
        oldest_in_doubt = connection.execute(
            text("SELECT id FROM payments WHERE status = 'in_doubt' ORDER BY in_doubt_since_us, id LIMIT 1")
        ).scalar_one()
        break_id = connection.execute(
            text(
                "SELECT id FROM reconciliation_breaks WHERE status = 'open' AND object_id IS NOT NULL"
                " ORDER BY id LIMIT 1 OFFSET 100"
            )
        ).scalar_one()
    day = reconcile_fixture.rfc3339(bulk.created_at_us)[:10]
    with database.read() as connection:
        disputed = connection.execute(
            text("SELECT id FROM payments WHERE tenant_id = :t AND idempotency_key = 'real-2'"), {"t": TENANTS[0]}
        ).scalar_one()
    dispute_id = disputes_fixture.by_services(database, TENANTS[0], disputed)
    return Made(
        **made, bulk_payment_id=bulk.id, bulk_processor_reference=bulk.processor_reference, break_id=break_id,
        oldest_in_doubt_payment_id=oldest_in_doubt, tenant=TENANTS[1], day=day, dispute_id=dispute_id,
        disputes=bulk_disputes + 1,
    )  # fmt: skip


def _bulk(
    database: Database, accounts: Accounts, *, now_us: int, start_us: int, step_us: int, payments: int, payouts: int
) -> None:
    dialect = database.dialect
    numbers = _NUMBERS[dialect]
    pad16, pad15 = _pad(dialect, "n", 16), _pad(dialect, "n", 15)
    rows = _PAYMENT_ROWS.format(
        tenant_index=_tenant_index(),
        currency=_CURRENCY,
        account=_account_case(accounts.merchant),
        ulid_created=_ulid_time(":start_us + n * :step_us"),
        pad16=pad16,
        numbers=numbers,
    )
    rfc = _rfc3339
    birth_snapshot = _SNAPSHOT_PAYMENT.format(
        created_at=rfc(dialect, "created"),
        updated_at=rfc(dialect, "created"),
        failure_code="'null'",
        reference="'null'",
        refundable="0",
        status="'processing'",
    )
    final_snapshot = _SNAPSHOT_PAYMENT.format(
        created_at=rfc(dialect, "created"),
        updated_at=rfc(dialect, "created + 800000"),
        failure_code="CASE WHEN status = 'failed' THEN '\"card_declined\"' ELSE 'null' END",
        reference="CASE WHEN status = 'in_doubt' THEN 'null' ELSE '\"ch_' || uid || '\"' END",
        refundable="CASE WHEN status = 'succeeded' THEN amount ELSE 0 END",
        status="status",
    )
    common = {"rows": rows, "pad15": pad15, "ulid_created": _ulid_time("created")}
    answered = _ulid_time("created + 800000")
    refund_rows = _REFUND_ROWS.format(payments=rows, ulid_refund=_ulid_time("created + 60000000"), pad16=pad16)
    refund_common = {
        "rows": refund_rows,
        "pad15": pad15,
        "ulid_refund": _ulid_time("created"),
        "ulid_sent": _ulid_time("created + 900000"),
        "created_at": rfc(dialect, "created"),
    }
    payout_rows = _PAYOUT_ROWS.format(
        tenant_index=_tenant_index(),
        currency=_CURRENCY,
        source=_account_case(accounts.payout_source),
        ulid_payout=_ulid_time(":start_us + n * :payout_step_us"),
        pad16=pad16,
        numbers=numbers,
        tomorrow=f"'{reconcile_fixture.rfc3339(now_us + DAY_US)[:10]}'",
        execute_day=_day(dialect, "(:start_us + n * :payout_step_us)"),
    )
    payout_common = {
        "rows": payout_rows,
        "pad15": pad15,
        "ulid_payout": _ulid_time("created"),
        "ulid_payout_sent": _ulid_time("created + 1000000"),
    }

    def run_at(day: str) -> str:  # the run of day `day` (0-based): the day after, 01:00
        return f"(:start_us + (({day}) + 1) * {DAY_US} + 3600000000)"

    runs = _RUNS.format(
        ulid_run=_ulid_time(run_at("n")), pad16=pad16, run_day=_day(dialect, f"(:start_us + n * {DAY_US})"),
        run_at=run_at("n"), numbers=numbers,
    )  # fmt: skip
    breaks = _BREAKS.format(
        ulid_found=_ulid_time(f"{run_at('b / 10')} + 1000000"),
        pad_b=_pad(dialect, "b", 16),
        numbers=numbers,
        tenant_of_m=_tenant_index("m"),
        payment_of_m=f"'pay_' || {_ulid_time(':start_us + m * :step_us')} || {_pad(dialect, 'm', 16)}",
        run_of_d=f"'rcn_' || {_ulid_time(run_at('d'))} || {_pad(dialect, 'd', 16)}",
    )
    parameters = {
        "count": payments,
        "start_us": start_us,
        "step_us": step_us,
        "now_us": now_us,
        "payouts": payouts,
        "payout_step_us": DAYS * DAY_US // payouts,
        "per_day": payments // DAYS,
    }
    statements = [
        ("payments", _PAYMENTS.format(rows=rows), parameters),
        ("payment births", _PAYMENT_BIRTHS.format(snapshot=birth_snapshot, **common), parameters),
        ("payment calls", _PAYMENT_CALLS.format(ulid_answered=answered, **common), parameters),
        (
            "payment finals",
            _PAYMENT_FINALS.format(snapshot=final_snapshot, ulid_answered=answered, **common),
            parameters,
        ),
        ("refunds", _REFUNDS.format(rows=refund_rows), parameters),
        ("refund births", _REFUND_BIRTHS.format(**refund_common), parameters),
        ("refund calls", _REFUND_CALLS.format(**refund_common), parameters),
        ("refund finals", _REFUND_FINALS.format(**refund_common), parameters),
        ("payouts", _PAYOUTS.format(rows=payout_rows), {**parameters, "count": payouts}),
        ("payout births", _PAYOUT_BIRTHS.format(**payout_common), {**parameters, "count": payouts}),
        ("payout calls", _PAYOUT_CALLS.format(**payout_common), {**parameters, "count": payouts}),
        ("payout finals", _PAYOUT_FINALS.format(**payout_common), {**parameters, "count": payouts}),
        ("reconciliation runs", runs, {**parameters, "count": DAYS}),
        ("reconciliation breaks", breaks, {**parameters, "count": DAYS * BREAKS_PER_DAY}),
    ]
    for name, statement, values in statements:
        sql = _literal(statement, values)
        began = time.perf_counter()
        count = database.transaction(lambda connection, sql=sql: connection.execute(sql).rowcount)
        log(f"  {name}: {count:,} rows in {time.perf_counter() - began:.1f} s")


def _literal(statement: str, values: dict[str, int]) -> TextClause:
    """The statement with its (integer) parameters written in, every other colon escaped: the
    JSON in the SQL (`"refunded_minor":0`, `"description":null`) would read as bind parameters."""
    for name in sorted(values, key=len, reverse=True):
        statement = statement.replace(f":{name}", str(int(values[name])))
    return text(statement.replace(":", "\\:"))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


_TIMINGS: Final = payments.PaymentTimings(processing_stale_ms=3_600_000, wait_ms=10_000, first_retry_ms=3_600_000)


def _by_services(database: Database, processor: Processor, accounts: Accounts) -> dict[str, str]:
    tenant = TENANTS[0]
    merchant = accounts.merchant[(tenant, "USD")]
    database.transaction(
        lambda connection: webhooks.create_endpoint(
            connection, tenant, keyring=Keyring([os.urandom(32)]), url="http://127.0.0.1:9/bench", events=["*"],
            description="bench", now_us=clock_now_us(),  # nothing is delivered: its secret is never opened
        )
    )  # fmt: skip

    def pay(key: str, through: Processor) -> str:
        new = NewPayment(12_345, "USD", "card", "tok_ok", merchant, None, {}, "local")
        scope = KeyScope(tenant, key, "bench", clock_now_us(), None)
        payments.create_payment(database, through, scope, new, timings=_TIMINGS, render_refusal=render_refusal)
        with database.read() as connection:
            found = connection.execute(
                text("SELECT id FROM payments WHERE tenant_id = :t AND idempotency_key = :k"), {"t": tenant, "k": key}
            ).scalar_one()
        return str(found)

    made = [pay(f"real-{index}", processor) for index in range(REAL_PAYMENTS)]
    lifecycle_log = logging.getLogger("paycore.lifecycle")
    level = lifecycle_log.level
    lifecycle_log.setLevel(logging.ERROR)  # "in doubt": what the fixture means to cause
    try:
        in_doubt = pay("real-in-doubt", Unanswered(charges_succeed=False))
    finally:
        lifecycle_log.setLevel(level)
    refund = database.transaction(
        lambda connection: refunds.create_refund(
            connection, tenant, NewRefund(made[0], 5_000, idempotency_key="real-refund"), actor="local",
            now_us=clock_now_us(),
        )
    )  # fmt: skip
    approval = database.transaction(
        lambda connection: refunds.create_refund(
            connection, tenant, NewRefund(made[1], 6_000, idempotency_key="real-approval", approval_threshold_minor=1),
            actor="local", now_us=clock_now_us(),
        )
    )  # fmt: skip
    policy = reconcile_fixture._POLICY
    refund_rounds.send_due(database, processor, policy, "bench", actor="worker:send_refunds")
    source = accounts.payout_source[(tenant, "USD")]
    payout = database.transaction(
        lambda connection: payouts.schedule(
            connection, tenant, NewPayout(25_000, "USD", source, "ach", ACH, idempotency_key="real-payout"),
            actor="local", now_us=clock_now_us(),
        )
    )  # fmt: skip
    payout_rounds.queue_due(database, 100, actor="worker:queue_payouts")
    payout_rounds.send_due(database, processor, policy, "bench", actor="worker:send_payouts")
    return {
        "payment_id": made[0],
        "refund_id": refund.id,
        "approval_refund_id": approval.id,
        "in_doubt_payment_id": in_doubt,
        "payout_id": payout.id,
        "account_id": merchant,
    }
