"""Taking a payment (SPEC §6): commit, call the processor outside any transaction, commit.

1. One transaction claims the idempotency key *open*, stores the payment in `processing`
   with the request id it will send, and writes the ledger's pending transfer (processor
   clearing -> destination). After this commit no duplicate can start a second payment, and
   the request id is known before any call is made (SPEC §3.1, outgoing calls).
2. The processor is called with no transaction open.
3. One transaction records the call and applies its evidence (`lifecycle.apply_evidence`): a
   result moves the payment; no answer makes it `in_doubt`; then the key's response is
   recorded if nobody (a faster webhook) recorded it first, and that response is returned.

A crash between 1 and 3 leaves a `processing` payment whose next attempt is due after
`processing_stale_ms`: the resolver picks it up and asks the processor (SPEC §10). So does a
database that went away during 2 or 3: the request is answered `CommitOutcomeUnknown` (the
payment exists and may have been charged; the client cannot know), and the client's retry
with the same key replays whatever the resolver recorded on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Connection

from paycore.audit import service as audit
from paycore.db.availability import CommitOutcomeUnknown, DatabaseUnavailable
from paycore.db.engine import Database
from paycore.idempotency import service as idempotency
from paycore.idempotency.service import KeyScope, Outcome, RefusalToRecord
from paycore.kit import actors, ids
from paycore.kit.clock import now_us as clock_now_us
from paycore.kit.errors import DomainError, InvalidStartingAfter
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.errors import AccountNotFound
from paycore.ledger.service import EntrySpec, TransferSpec
from paycore.lifecycle import recording
from paycore.lifecycle.calls import Call
from paycore.lifecycle.calls import record as record_call
from paycore.lifecycle.columns import NEXT_ATTEMPT_AT_US
from paycore.lifecycle.machine import Machine
from paycore.lifecycle.store import set_values
from paycore.payments import (
    accept,
    accept_plan,
    lifecycle,
    processor_calls,
    repository,
    schemas,
    settle,
    settle_plan,
    states,
)
from paycore.payments.errors import CurrencyNotAccepted
from paycore.payments.models import payments
from paycore.payments.schemas import HISTORY_LENGTH_MAX, payment_json
from paycore.payments.types import NewPayment, Payment, new_payment, payment_from_row
from paycore.processor.port import ChargeResult, Processor

_POLL_MS = 25


@dataclass(frozen=True)
class PaymentTimings:
    processing_stale_ms: int  # a `processing` payment untouched this long is the resolver's
    wait_ms: int  # how long a duplicate waits for the first request's answer
    first_retry_ms: int  # when the resolver first asks about a payment left without an answer


# The payment's lifecycle, the one home of reading payments by id and by status (`load`, `find`,
# `find_many`, `moved_between`, `search`, `summary`, `working_since_us`, `in_doubt_summary`):
# other domains and the console call `payments.MACHINE.find(...)`, as every status change goes
# through it.
MACHINE: Final[Machine[Payment]] = lifecycle.MACHINE


def create_payment(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    new: NewPayment,
    *,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """Returns (response, replayed)."""

    def reference() -> Payment | Outcome | None:
        return database.transaction(lambda connection: _start(connection, scope, new, timings, render_refusal))

    # Step 1 on the data plane (`accept.py`); `_start` is its reference path.
    return _from_start(
        database,
        processor,
        scope,
        new,
        timings,
        lambda: accept.accept(
            database, scope, new, processing_stale_ms=timings.processing_stale_ms, reference=reference
        ),
    )


def create_payment_by_reference(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    new: NewPayment,
    *,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> tuple[Outcome, bool]:
    """`create_payment` once the accept phase's data plane wrote nothing (`create_on_loop`):
    step 1 by the reference path, then as `create_payment`. Blocking."""
    return _from_start(
        database,
        processor,
        scope,
        new,
        timings,
        lambda: database.transaction(lambda connection: _start(connection, scope, new, timings, render_refusal)),
    )


def _from_start(
    database: Database,
    processor: Processor,
    scope: KeyScope,
    new: NewPayment,
    timings: PaymentTimings,
    start: Callable[[], Payment | Outcome | None],
) -> tuple[Outcome, bool]:
    try:
        started = start()
    except RefusalToRecord as refusal:
        outcome = refusal.outcome
        return database.transaction(lambda connection: idempotency.record_refusal(connection, scope, outcome))
    if isinstance(started, Outcome):
        return started, True
    if started is None:
        return await_answer(database, scope, timings.wait_ms), True
    return call_and_settle(database, processor, scope, started, new.actor, timings), False


def call_and_settle(
    database: Database, processor: Processor, scope: KeyScope, started: Payment, actor: str, timings: PaymentTimings
) -> Outcome:
    """Steps 2 and 3 once the payment is accepted: the processor's call, with no transaction
    open, then its answer settled. Blocking."""
    call = processor_calls.charge(processor, started)
    try:
        # The common case on the data plane (`settle.py`); everything else through `finish`.
        answer = settle.settle(database, started, call, actor=actor)
        if answer is None:
            first_retry_ms = timings.first_retry_ms
            answer = database.transaction(
                lambda connection: finish(connection, scope, started, call, actor=actor, first_retry_ms=first_retry_ms)
            )
        return answer
    except DatabaseUnavailable as error:
        raise recorded_outcome_unknown(error) from error


def recorded_outcome_unknown(error: DatabaseUnavailable) -> CommitOutcomeUnknown:
    """Step 1 committed and the processor was called, but step 3 could not be recorded: the
    payment's outcome is not known to the client, and the resolver settles it once the
    database is back."""
    return CommitOutcomeUnknown(f"the payment was created but its answer could not be recorded: {error}")


def finish(
    connection: Connection,
    scope: KeyScope,
    started: Payment,
    call: Call[ChargeResult],
    *,
    actor: str,
    first_retry_ms: int,
) -> Outcome:
    """Step 3 on the reference path (the payment's lifecycle through SQLAlchemy Core), in the
    caller's transaction: what `settle.py` leaves to it, and whatever the payment is by now."""
    now = clock_now_us()
    payment = lifecycle.MACHINE.load(connection, started.tenant_id, started.id, for_update=True)
    record_call(
        connection,
        payment.tenant_id,
        object_type="payment",
        object_id=payment.id,
        call=call,
        attempt=None,
        actor=actor,
        now_us=now,
    )
    # No answer (in_doubt) or `pending`: the resolver asks soon; a webhook may come first.
    due = {NEXT_ATTEMPT_AT_US: now + first_retry_ms * 1000}
    applied = lifecycle.MACHINE.apply_evidence(
        connection,
        payment,
        call.evidence,
        cause=settle_plan.CAUSE,
        actor=actor,
        now_us=now,
        values=due,
    )
    if not applied.changed and applied.item.status in states.UNRESOLVED:
        set_values(connection, payments, payment.tenant_id, payment.id, due)
    if applied.changed or applied.item.status == states.PROCESSING:
        settled = lifecycle.settle_creation_response(connection, applied.item)
        if settled is not None:
            return settled  # recorded in this transaction: no read back
    answer = idempotency.recorded(connection, scope)
    assert answer is not None, "the payment's answer was settled in this transaction or before it"
    return answer


def _start(
    connection: Connection,
    scope: KeyScope,
    new: NewPayment,
    timings: PaymentTimings,
    render_refusal: Callable[[DomainError], Outcome],
) -> Payment | Outcome | None:
    if not idempotency.claim_open(connection, scope):
        return idempotency.recorded(connection, scope)  # None: the first request has no answer yet
    try:
        return _insert_payment(connection, scope, new, timings)
    except DomainError as error:
        if not error.recorded:
            raise
        raise RefusalToRecord(render_refusal(error)) from error


def _insert_payment(connection: Connection, scope: KeyScope, new: NewPayment, timings: PaymentTimings) -> Payment:
    now = scope.now_us
    tenant_id = scope.tenant_id
    try:
        destination = ledger.get_account(connection, tenant_id, new.destination_account_id)
    except AccountNotFound as error:
        raise AccountNotFound("no such destination account", param="destination_account") from error
    if destination.currency != new.currency:
        raise CurrencyNotAccepted(
            f"the destination account holds {destination.currency}, the payment is in {new.currency}",
            param="currency",
        )
    clearing = ledger.ensure_account(
        connection,
        tenant_id,
        code=chart.processor_clearing(new.currency),
        currency=new.currency,
        normal_balance="debit",
        no_overdraft=False,
        now_us=now,
    )
    payment_id = ids.new_id("pay")
    transfer = ledger.create_transfer(
        connection,
        tenant_id,
        TransferSpec(
            entries=(
                EntrySpec(clearing.id, "debit", new.amount_minor),
                EntrySpec(destination.id, "credit", new.amount_minor),
            ),
            pending=True,
            currency=new.currency,
            reference_type="payment",
            reference_id=payment_id,
            owner_id=payment_id,
        ),
        now_us=now,
        known_accounts={clearing.id: clearing, destination.id: destination},
    )
    due_us = now + timings.processing_stale_ms * 1000
    payment = new_payment(tenant_id, payment_id, scope.key, new, states.PROCESSING, transfer.id, now, due_us)
    recording.create(connection, lifecycle.MACHINE, payment, cause=accept_plan.CAUSE, actor=new.actor)
    return payment  # what was inserted: no re-read


def await_answer(database: Database, scope: KeyScope, wait_ms: int) -> Outcome:
    """A duplicate of a request still running: wait (bounded) for its answer, then replay it."""
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        with database.read() as connection:
            answer = idempotency.recorded(connection, scope)
        if answer is not None:
            return answer
        if time.monotonic() >= deadline:
            raise idempotency.in_progress_error()
        time.sleep(_POLL_MS / 1000)


def get_payment_json(connection: Connection, tenant_id: str, payment_id: str) -> dict[str, object]:
    payment = lifecycle.MACHINE.load(connection, tenant_id, payment_id)
    history = audit.events_of(connection, tenant_id, payment_id, limit=HISTORY_LENGTH_MAX)
    return payment_json(payment, history)


def list_payments(
    connection: Connection, tenant_id: str, *, status: str | None, starting_after: str | None, limit: int
) -> list[Payment]:
    """Newest first. `starting_after` is a payment of the tenant (whatever its status now:
    the in-doubt queue pages on while its items resolve); anything else is refused."""
    if starting_after is not None and not repository.exists(connection, tenant_id, starting_after):
        raise InvalidStartingAfter("starting_after is not a payment of this tenant", param="starting_after")
    rows = repository.list_payments(connection, tenant_id, status=status, starting_after=starting_after, limit=limit)
    return [payment_from_row(row._mapping) for row in rows]


def import_settled_payment(
    connection: Connection,
    tenant_id: str,
    *,
    payment_id: str,
    amount_minor: int,
    currency: str,
    destination_account_id: str,
    now_us: int,
) -> Payment:
    """Store a payment the processor already settled (no call is made): a `succeeded` payment
    and its posted ledger transfer (processor clearing -> destination). For loading charges
    from elsewhere, e.g. the refund replay entry point (`paycore.refunds.handle`)."""
    clearing = ledger.ensure_account(
        connection,
        tenant_id,
        code=chart.processor_clearing(currency),
        currency=currency,
        normal_balance="debit",
        no_overdraft=False,
        now_us=now_us,
    )
    transfer = ledger.create_transfer(
        connection,
        tenant_id,
        TransferSpec(
            entries=(
                EntrySpec(clearing.id, "debit", amount_minor),
                EntrySpec(destination_account_id, "credit", amount_minor),
            ),
            currency=currency,
            reference_type="payment",
            reference_id=payment_id,
            owner_id=payment_id,
        ),
        now_us=now_us,
    )
    new = NewPayment(amount_minor, currency, "card", "imported", destination_account_id, None, {}, actors.LOCAL)
    payment = new_payment(
        tenant_id, payment_id, f"import:{payment_id}", new, states.SUCCEEDED, transfer.id, now_us, None
    )
    recording.create(connection, lifecycle.MACHINE, payment, cause="imported_settled", actor=actors.LOCAL)
    return payment


# --- what other domains read (the refund ceiling and hold: refunds/ceiling.py, refunds/money.py) ---

authorizations_open: Final = repository.authorizations_open  # the open authorizations' gauges
# The in-doubt captures past their authorization's expiry (reconciliation/expiry.py).
captures_in_doubt_expired: Final = repository.captures_in_doubt_expired
IN_DOUBT: Final = states.IN_DOUBT
CAPTURE: Final = states.CAPTURE


captured_minor: Final = schemas.captured_minor  # what a refund may give back at most (SPEC §6.1)
state_proved: Final = lifecycle.state_proved  # the payment's status a charge's status proves
# What the processor said (a webhook, a report line), or a person (a confirmed manual
# resolution), applied through the payment's lifecycle.
apply_evidence: Final = lifecycle.apply_evidence
