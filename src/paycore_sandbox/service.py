"""The sandbox processor's front door: `Sandbox`.

It owns its storage (a `Database` on its own URL, tables created at open), its fault plan,
and its webhook outbox. Every call is one transaction, committed before it returns; nothing
leaves the process inside a transaction. Transports (in-process, HTTP) ask `decide(op)`
first, then call `charge` / `capture` / `cancel` / `refund` / `send_payout` / `get_*` with that decision, and apply
its transport fault themselves.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Any, Final

from sqlalchemy import Connection, inspect

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.kit import clock
from paycore.processor.port import (
    CAPTURE_METHODS,
    CancelRequest,
    CaptureRequest,
    ChargeRequest,
    ChargeResult,
    PayoutRequest,
    PayoutResult,
    ProcessorRefused,
    RefundRequest,
    RefundResult,
)
from paycore_sandbox import (
    authorization_repository,
    authorizations,
    bank,
    bank_accounts,
    bank_repository,
    disputes,
    processing,
    repository,
    settlement,
)
from paycore_sandbox.bank_files import BatchFile, batch_file
from paycore_sandbox.checks import check_money, check_text
from paycore_sandbox.dispute_models import disputes as dispute_table
from paycore_sandbox.dispute_service import DisputeCalls, answer
from paycore_sandbox.faults import NO_FAULTS, REPORT_FAULTS, Decision, FaultInjector, FaultPlan, Op
from paycore_sandbox.limits import (
    BANK_BATCH_MAX_MAX,
    DEFAULT_WEBHOOK_SECRET,
    DESCRIPTION_LENGTH_MAX,
    MERCHANT_ID_LENGTH_MAX,
    REQUEST_ID_LENGTH_MAX,
    SandboxSettings,
    settings_from_environment,
)
from paycore_sandbox.models import REPORT_FAULTS_CHECK, bank_payouts, charges, metadata, report_faults, webhooks
from paycore_sandbox.schemas import render_batch
from paycore_sandbox.sink import WebhookSink
from paycore_sandbox.webhooks import Deliverer

log = logging.getLogger(__name__)
TOKENS: Final = tuple(processing.TOKENS)


class SandboxSchemaOutdated(RuntimeError):
    """The sandbox database was made by an older paycore: the sandbox has no migrations."""


def _predates(database: Database) -> str | None:
    """What a sandbox database made by an older paycore lacks, that `create_all` (which only adds
    missing tables) cannot add; None when it has everything or is empty."""
    inspector = inspect(database.engine)
    tables = set(inspector.get_table_names())
    if webhooks.name in tables and bank_payouts.name not in tables:
        return "the bank rail"
    if webhooks.name in tables and dispute_table.name not in tables:
        return "disputes"
    if charges.name in tables and "capture" not in {column["name"] for column in inspector.get_columns(charges.name)}:
        return "manual capture (authorizations)"
    if report_faults.name in tables:
        checks = {check["name"]: check["sqltext"] for check in inspector.get_check_constraints(report_faults.name)}
        allowed = str(checks.get(REPORT_FAULTS_CHECK, ""))
        missing = [name for name in REPORT_FAULTS if f"'{name}'" not in allowed]
        if missing:
            return f"the report faults {', '.join(missing)}"
    return None


class Sandbox(DisputeCalls):
    def __init__(self, database: Database, settings: SandboxSettings, webhook_secret: str) -> None:
        self.database = database
        self.settings = settings
        self.faults = FaultInjector(settings)
        self._deliverer = Deliverer(database, settings, webhook_secret)
        self._released = threading.Event()

    @classmethod
    def open(
        cls,
        database_url: str,
        *,
        webhook_secret: str = DEFAULT_WEBHOOK_SECRET,
        settings: SandboxSettings | None = None,
    ) -> Sandbox:
        """Connect to the sandbox's own database and create its tables if missing. Without
        `settings`, the defaults with what the environment sets (limits.settings_from_environment)."""
        chosen = settings or settings_from_environment(os.environ)
        database = Database(Settings(database_url=database_url))
        outdated = _predates(database)
        if outdated is not None:
            database.dispose()
            raise SandboxSchemaOutdated(
                f"the sandbox database {database_url!r} predates {outdated} and the sandbox has no "
                "migrations: its state is test state, delete it (or its sandbox_* tables) and start again"
            )
        metadata.create_all(database.engine, checkfirst=True)
        return cls(database, chosen, webhook_secret)

    def close(self) -> None:
        self.release_held()
        self.database.dispose()

    def hold(self, hold_ms: int) -> None:
        """Hold a dropped request or answer for `hold_ms`, as a network would, or until
        `release_held`."""
        self._released.wait(hold_ms / 1000)

    def release_held(self) -> None:
        """End every hold now, and hold nothing from here on: a server shutting down waits for
        its requests, and a held one would keep it up to `hold_ms` for nobody (the caller has
        timed out; the answer is the same 504)."""
        self._released.set()

    # --- the fault plan ---------------------------------------------------------------

    def set_fault_plan(self, plan: object) -> FaultPlan:
        """Replace the plan (parsed JSON); raises FaultPlanError if it is not valid."""
        return self.faults.set_plan(plan)

    def clear_fault_plan(self) -> None:
        self.faults.clear()

    def fault_plan(self) -> dict[str, Any]:
        return self.faults.describe()

    def decide(self, op: Op) -> Decision:
        return self.faults.decide(op)

    # --- the processor ----------------------------------------------------------------

    def charge(self, request: ChargeRequest, faults: Decision = NO_FAULTS) -> ChargeResult:
        """Take (or replay) a charge. The fault plan is not consulted here: a transport asks
        `decide("charge")` and passes the decision, whose settle/webhook faults apply here."""
        _check_charge(request)
        now_us = clock.now_us()
        return self.database.transaction(
            lambda connection: processing.create_charge(connection, request, faults, now_us)
        )

    @staticmethod
    def answer_lost(request: ChargeRequest) -> bool:
        """True when every answer to this charge is lost on the way back (tok_timeout)."""
        behaviour = processing.TOKENS.get(request.token)
        return behaviour is not None and behaviour.answer_lost

    def get_charge(self, request_id: str) -> ChargeResult | None:
        """The charge now; an authorization past its expiry is expired first (and its event
        queued), so that a read never shows capturable what a capture would refuse."""
        with self.database.read() as connection:
            row = repository.find_charge(connection, request_id)
        if row is None:
            return None
        now_us = clock.now_us()
        if authorizations.is_due(row, now_us):
            return self.database.transaction(lambda connection: self._expire_and_read(connection, request_id, now_us))
        return processing.charge_result(row)

    @staticmethod
    def _expire_and_read(connection: Connection, request_id: str, now_us: int) -> ChargeResult:
        row = repository.find_charge(connection, request_id)
        assert row is not None, "a charge is never deleted"
        if authorizations.is_due(row, now_us) and authorizations.expire(connection, row, now_us):
            row = repository.find_charge(connection, request_id)
            assert row is not None and row["status"] == "expired"
        return processing.charge_result(row)

    def capture(self, request: CaptureRequest, faults: Decision = NO_FAULTS) -> ChargeResult:
        """Capture all or part of an authorization (or replay); like `charge`, the transport asks
        `decide("capture")` and passes the decision."""
        _check_action(request)
        check_money(request.amount_minor, request.currency)
        now_us = clock.now_us()
        return answer(
            self.database.transaction(lambda connection: authorizations.capture(connection, request, faults, now_us))
        )

    def cancel(self, request: CancelRequest, faults: Decision = NO_FAULTS) -> ChargeResult:
        """Cancel an authorization, releasing all of it (or replay)."""
        _check_action(request)
        now_us = clock.now_us()
        return answer(
            self.database.transaction(lambda connection: authorizations.cancel(connection, request, faults, now_us))
        )

    def refund(self, request: RefundRequest, faults: Decision = NO_FAULTS) -> RefundResult:
        _check_refund(request)
        now_us = clock.now_us()
        return self.database.transaction(
            lambda connection: processing.create_refund(connection, request, faults, now_us)
        )

    def get_refund(self, request_id: str) -> RefundResult | None:
        with self.database.read() as connection:
            row = repository.find_refund(connection, request_id)
        return None if row is None else processing.refund_result(row)

    def settlement_report(self, day: str) -> Iterator[str]:
        return settlement.report_lines(self.database, day, self.settings.report_rows_per_fetch)

    # --- the bank rail ------------------------------------------------------------------

    def send_payout(self, request: PayoutRequest, faults: Decision = NO_FAULTS) -> PayoutResult:
        """Accept (or replay) a payout into the open batch of its rail; like `charge`, the
        transport asks `decide("payout")` and passes the decision."""
        bank_accounts.check_payout(request)
        now_us = clock.now_us()
        try:
            return self.database.transaction(
                lambda connection: bank.create_payout(connection, request, faults, self.settings, now_us)
            )
        except bank.Replayed as replayed:
            return bank.replay(replayed.row, request)

    def get_payout(self, request_id: str) -> PayoutResult | None:
        with self.database.read() as connection:
            row = bank_repository.find_payout(connection, request_id)
        return None if row is None else bank.payout_result(row)

    def batch(self, batch_id: str) -> dict[str, Any] | None:
        """A batch and its payouts, as JSON, or None if there is no such batch."""
        with self.database.read() as connection:
            row = bank_repository.find_batch(connection, batch_id)
            if row is None:
                return None
            payouts = bank_repository.payouts_of_batch(connection, batch_id, BANK_BATCH_MAX_MAX)
        return render_batch(row, [bank.payout_result(payout) for payout in payouts])

    def batch_file(self, batch_id: str) -> BatchFile | None:
        """The NACHA or pain.001 file of a closed batch; None if there is no such batch,
        ProcessorRefused("batch_open") while it is open."""
        with self.database.read() as connection:
            row = bank_repository.find_batch(connection, batch_id)
            if row is None:
                return None
            if row["closed_at_us"] is None:
                raise ProcessorRefused("batch_open", f"batch {batch_id} is still open: its file is made when it closes")
            payouts = bank_repository.payouts_of_batch(connection, batch_id, BANK_BATCH_MAX_MAX)
        return batch_file(row, payouts, self.settings.ach_sec_code)

    # --- background work: settling late items, moving payouts, delivering webhooks ----

    def settle_due(self, now_us: int | None = None) -> int:
        """Do what is due at `now_us`, one transaction per kind of step, each bounded: give
        pending charges and refunds their final status (settle_batch_max of each), decide and
        close the disputes whose decision or deadline came and open those planned for
        tok_disputed charges (settle_batch_max of each), close the bank batches whose window
        ended, then reject, settle or return the payouts whose next step is due (bank_steps_max
        each). Return how many things changed."""
        now = clock.now_us() if now_us is None else now_us
        disputed_before_us = now - self.settings.dispute_open_after_ms * 1_000
        if not repository.anything_due(self.database, now, disputed_before_us):
            return 0  # the usual answer, read without taking the write lock four times
        changed = self.database.transaction(lambda connection: self._settle(connection, now))
        changed += self.database.transaction(
            lambda connection: disputes.run_due(connection, self.settings, now, lambda: self.decide("dispute_open"))
        )
        changed += self.database.transaction(lambda connection: bank.close_due_batches(connection, self.settings, now))
        return changed + self.database.transaction(
            lambda connection: bank.run_due_steps(connection, self.settings, now)
        )

    def _settle(self, connection: Connection, now_us: int) -> int:
        settled = 0
        for object_type in ("charge", "refund"):
            for row in repository.due_to_settle(connection, object_type, now_us, self.settings.settle_batch_max):
                settled += processing.settle(connection, object_type, row, now_us)
        for due in authorization_repository.due_to_expire(connection, now_us, self.settings.settle_batch_max):
            settled += authorizations.expire(connection, due, now_us)
        return settled

    def deliver_due(self, sink: WebhookSink, now_us: int | None = None) -> int:
        """Send every webhook due at `now_us` once (bounded); return how many got a 2xx."""
        return self._deliverer.deliver_due(sink, now_us)

    def webhook_backoff_ms(self, attempt: int) -> int:
        return self._deliverer.backoff_ms(attempt)

    def run_background(self, sink: WebhookSink, stop: threading.Event, interval_ms: int = 200) -> None:
        """Settle and deliver until `stop` is set: drain in bounded rounds, then sleep."""
        assert interval_ms >= 1
        while not stop.is_set():
            try:
                for _ in range(self.settings.background_rounds_max):
                    if self.settle_due() + self.deliver_due(sink) == 0 or stop.is_set():
                        break
            except Exception:  # a failed round is logged and tried again next interval
                log.exception("sandbox background round failed")
            stop.wait(interval_ms / 1000)

    def start_background(self, sink: WebhookSink, interval_ms: int = 200) -> Background:
        """`run_background` on a daemon thread; stop it with `.stop()`."""
        stop = threading.Event()
        thread = threading.Thread(
            target=self.run_background, args=(sink, stop, interval_ms), daemon=True, name="sandbox-background"
        )
        thread.start()
        return Background(thread, stop)


class Background:
    STOP_TIMEOUT_S: Final = 10.0

    def __init__(self, thread: threading.Thread, stop_event: threading.Event) -> None:
        self.thread = thread
        self.stop_event = stop_event

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(self.STOP_TIMEOUT_S)


# --- request checks: before any transaction, so a refusal stores nothing ------------------


def _check_charge(request: ChargeRequest) -> None:
    check_text("request_id", request.request_id, REQUEST_ID_LENGTH_MAX)
    check_text("merchant_id", request.merchant_id, MERCHANT_ID_LENGTH_MAX)
    check_money(request.amount_minor, request.currency)
    if request.description is not None:
        if not isinstance(request.description, str) or len(request.description) > DESCRIPTION_LENGTH_MAX:
            raise ProcessorRefused("invalid_request", f"description is at most {DESCRIPTION_LENGTH_MAX} characters")
        if "\x00" in request.description:
            raise ProcessorRefused("invalid_request", "description must not contain NUL")
    if request.token not in processing.TOKENS:
        raise ProcessorRefused("invalid_token", f"unknown token {request.token!r}; test tokens: {', '.join(TOKENS)}")
    if request.capture not in CAPTURE_METHODS:
        raise ProcessorRefused("invalid_request", f"capture is one of {', '.join(CAPTURE_METHODS)}")


def _check_action(request: CaptureRequest | CancelRequest) -> None:
    check_text("request_id", request.request_id, REQUEST_ID_LENGTH_MAX)
    check_text("merchant_id", request.merchant_id, MERCHANT_ID_LENGTH_MAX)
    check_text("payment_reference", request.payment_reference, REQUEST_ID_LENGTH_MAX)


def _check_refund(request: RefundRequest) -> None:
    check_text("request_id", request.request_id, REQUEST_ID_LENGTH_MAX)
    check_text("merchant_id", request.merchant_id, MERCHANT_ID_LENGTH_MAX)
    check_text("payment_reference", request.payment_reference, REQUEST_ID_LENGTH_MAX)
    check_money(request.amount_minor, request.currency)
