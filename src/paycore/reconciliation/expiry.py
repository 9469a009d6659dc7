"""An expiry the processor's reports imply (SPEC §6.1, ADR 0029).

The report lists captures, never authorizations, expiries or cancels. One day's report without
a capture line proves nothing (a line may come late, the report may be a part of the day). But
the processor can capture an authorization only between its making and its expiry (its own
`authorization_expires_at`, stored on the payment), and reports a capture in the report of the
day it happened, or of the next day when it happened in the day's last `grace_ms` (the grace
reconciliation's `missing_at_processor` already allows). So when the complete reports of every
day from the authorization's day through the day of its expiry plus the grace all leave its
capture out, the processor has said, in its own records, that it captured nothing before the
authorization expired: the authorization expired. A payment `in_doubt` with its capture in
flight is then resolved to `canceled` (`cancellation_reason: "expired"`), its hold released,
through the payment's own `apply_evidence` (the path the resolver's status query and the
`charge.expired` webhook take), with cause `settlement_report`. Whoever comes second changes
nothing (the lifecycle's compare-and-set on the locked row), so a re-run, in any process, is a
no-op.

A day's report is complete when the day's latest completed run read the processor's own report
(source `processor`, not a person's file) and started after the day ended (the moment
`closing.window` treats a day as over). The authorization's day stands for the capture's attempt:
no capture can precede the authorization, so it is a day early at worst, never late. Never
paycore's clock: a day not reconciled, a day reconciled from a file or before its end, or a
break of one of those days quoting the payment (a malformed line could have been its capture)
leaves the payment in doubt for the resolver's status query or the `charge.expired` webhook.
"""

from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Final

from sqlalchemy import Connection

from paycore.db.engine import Database
from paycore.kit import clock
from paycore.lifecycle import faults
from paycore.lifecycle.evidence import Evidence
from paycore.payments import service as payments
from paycore.payments.types import Payment
from paycore.processor.port import ChargeResult
from paycore.reconciliation import expiry_repository, repository
from paycore.reconciliation.moves import CAUSE

PAGE_PAYMENTS: Final = 200  # in-doubt captures read per statement
PAGES_MAX: Final = 50  # pages per run: 10,000 in-doubt captures past expiry looked at, the rest next run
SPAN_DAYS_MAX: Final = 31  # an authorization living longer is left to the status query


def resolve_implied(database: Database, *, grace_ms: int, run_id: str, actor: str) -> int:
    """Resolve the in-doubt captures whose authorization's expiry the complete reports imply;
    one transaction per payment. Returns how many this call moved."""
    now_us = clock.now_us()
    expired_before_us = now_us - grace_ms * 1000
    moved = 0
    after: tuple[str, str] | None = None
    for _ in range(PAGES_MAX):
        with database.read() as connection:
            page = payments.captures_in_doubt_expired(
                connection, expired_before_us=expired_before_us, after=after, limit=PAGE_PAYMENTS
            )
        for tenant_id, payment_id in page:
            one = partial(_resolve, tenant_id=tenant_id, payment_id=payment_id, grace_ms=grace_ms, run_id=run_id)
            # One that cannot be moved (its hold resolved behind its back: a bug) is logged
            # (`work_fault`) and stays in doubt; the others go on.
            done = faults.caught(
                partial(database.transaction, partial(one, actor=actor)), about={"payment_id": payment_id}
            )
            moved += done is True
        if len(page) < PAGE_PAYMENTS:
            break
        after = page[-1]
    return moved


def span(payment: Payment, *, grace_ms: int) -> list[tuple[str, int]] | None:
    """The days (and when each ends, µs) whose reports hold the payment's capture if the
    processor made it: from the authorization's day through the day of its expiry plus the
    grace. None when that is more than SPAN_DAYS_MAX days."""
    assert payment.authorization_expires_at_us is not None, payment.id
    first = clock.utc_day(payment.created_at_us)
    last = clock.utc_day(payment.authorization_expires_at_us + grace_ms * 1000)
    count = (last - first).days + 1
    if not 0 < count <= SPAN_DAYS_MAX:
        return None
    days = [first + dt.timedelta(days=offset) for offset in range(count)]
    return [(day.isoformat(), clock.day_start_us(day) + clock.DAY_US) for day in days]


def _resolve(
    connection: Connection, *, tenant_id: str, payment_id: str, grace_ms: int, run_id: str, actor: str
) -> bool:
    """One payment, locked: moved when the complete reports of its span leave its capture out
    (the run's `resolved` count with it, in the same transaction)."""
    payment = payments.MACHINE.find(connection, tenant_id, payment_id, for_update=True)
    if payment is None or payment.status != payments.IN_DOUBT or payment.operation != payments.CAPTURE:
        return False  # settled since the page was read
    days = span(payment, grace_ms=grace_ms)
    if days is None or not expiry_repository.reports_leave_out(connection, tenant_id, payment_id, days):
        return False
    evidence = Evidence.of_result(expired(payment))
    data = {"settlement_report_days": [days[0][0], days[-1][0]]}
    applied = payments.apply_evidence(
        connection, payment, evidence, cause=CAUSE, actor=actor, now_us=clock.now_us(), data=data
    )
    if applied.changed:
        repository.add_resolved(connection, run_id, count=1)
    return applied.changed


def expired(payment: Payment) -> ChargeResult:
    """The processor's word the reports imply, as its status query would say it: the
    authorization expired, nothing captured, all of it released."""
    assert payment.processor_reference is not None, payment.id  # it was authorized
    return ChargeResult(
        request_id=payment.processor_request_id,
        status="expired",
        processor_charge_id=payment.processor_reference,
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        capture="manual",
        amount_capturable_minor=0,
        amount_captured_minor=0,
        amount_released_minor=payment.amount_minor,
        authorization_expires_at_us=payment.authorization_expires_at_us,
    )
