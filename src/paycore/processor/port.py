"""The provider port (SPEC §8): what paycore asks of a card processor, and nothing else.

Business code depends on this module only. Under it sits a transport (in-process calls or
HTTP, `paycore.processor.transports`), and the fault injection of the sandbox lives there and
in the sandbox, never in business code.

The rules every implementation keeps:
- `request_id` is chosen by paycore, stored before the call, and reused on every retry while
  the outcome is unknown. The processor answers a repeated `request_id` with the original
  result and never moves money twice; a repeated `request_id` with different parameters is
  refused with `ProcessorRefused("request_id_reused")`.
- An answer is either a result (`succeeded`, `failed`, or `pending`: accepted, the final
  status comes later by webhook or query), a `ProcessorRefused` (the processor says it did
  nothing: bad request, reused id), or `ProcessorUnreachable` (timeout, dropped connection,
  5xx: the request may or may not have taken effect). Only the last makes an item `in_doubt`.
- `get_*` returns None when the processor has no record of the request id. That is evidence
  the request was not processed *yet*; it is never taken as a failure: the caller re-sends
  the same request id instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from paycore.lifecycle.errors import Refused, Unreachable

ResultStatus = Literal["succeeded", "failed", "pending"]
RESULT_STATUSES: tuple[ResultStatus, ...] = ("succeeded", "failed", "pending")
# A charge asked with `capture="manual"` is an authorization (SPEC §6.1): `requires_capture` once
# authorized, then `captured` (all or part; the rest released), `canceled` (all released) or
# `expired` (not captured within its lifetime: all released). An automatic charge never has these.
AuthorizationStatus = Literal["requires_capture", "captured", "canceled", "expired"]
AUTHORIZATION_STATUSES: tuple[AuthorizationStatus, ...] = ("requires_capture", "captured", "canceled", "expired")
ChargeStatus = Literal[ResultStatus, AuthorizationStatus]
CHARGE_STATUSES: tuple[ChargeStatus, ...] = (*RESULT_STATUSES, *AUTHORIZATION_STATUSES)
CaptureMethod = Literal["automatic", "manual"]
CAPTURE_METHODS: tuple[CaptureMethod, ...] = ("automatic", "manual")


@dataclass(frozen=True)
class ChargeRequest:
    request_id: str  # stable across retries; derived from the payment id
    merchant_id: str  # the paycore tenant the money is taken for
    amount_minor: int
    currency: str
    token: str  # the card or bank token from the client (sandbox: tok_ok, tok_declined, ...)
    description: str | None = None
    capture: CaptureMethod = "automatic"  # manual: authorize only; capture or cancel later


def charge_request_fields(request: ChargeRequest) -> dict[str, Any]:
    """The request's fields as sent and as logged: `capture` only when manual, so that an
    automatic charge's request is exactly what it was before authorizations."""
    # Field by field: every value is a str, an int or None, which `dataclasses.asdict` would only
    # deep-copy to itself (6.3 against 1.2 µs a request, by timeit).
    fields = {field.name: getattr(request, field.name) for field in dataclasses.fields(request)}
    if request.capture == "automatic":
        del fields["capture"]
    return fields


@dataclass(frozen=True)
class ChargeResult:
    """A charge as the processor sees it now. The amounts of an authorization (`capture`
    manual) are None for an automatic charge; for a manual one, once authorized, captured +
    released + capturable = amount_minor (all 0 while pending or when declined).
    `authorization_expires_at_us`: when an uncaptured authorization expires (manual only)."""

    request_id: str
    status: ChargeStatus
    processor_charge_id: str
    amount_minor: int
    currency: str
    failure_code: str | None = None
    capture: CaptureMethod = "automatic"
    amount_capturable_minor: int | None = None
    amount_captured_minor: int | None = None
    amount_released_minor: int | None = None
    authorization_expires_at_us: int | None = None


@dataclass(frozen=True)
class CaptureRequest:
    """Capture `amount_minor` (at most what is capturable) of an authorization, once; the rest
    of it is released. Answered with the charge after the capture (a ChargeResult)."""

    request_id: str  # stable across retries; the processor dedupes on it
    merchant_id: str
    payment_reference: str  # the processor_charge_id of the authorization
    amount_minor: int
    currency: str


@dataclass(frozen=True)
class CancelRequest:
    """Cancel (void) an authorization: all of it is released. Answered with the charge after."""

    request_id: str  # stable across retries; the processor dedupes on it
    merchant_id: str
    payment_reference: str  # the processor_charge_id of the authorization


@dataclass(frozen=True)
class RefundRequest:
    request_id: str  # stable across retries; derived from the refund id
    merchant_id: str
    payment_reference: str  # the processor_charge_id of the charge being refunded
    amount_minor: int
    currency: str


@dataclass(frozen=True)
class RefundResult:
    request_id: str
    status: ResultStatus
    processor_refund_id: str
    amount_minor: int
    currency: str
    failure_code: str | None = None


PayoutStatus = Literal["accepted", "rejected", "settled", "returned"]
PAYOUT_STATUSES: tuple[PayoutStatus, ...] = ("accepted", "rejected", "settled", "returned")
Rail = Literal["ach", "sepa"]


DisputeStatus = Literal["needs_response", "under_review", "won", "lost", "warning_needs_response", "warning_closed"]
# A dispute's statuses, the processor's words and paycore's (SPEC §6.2, docs/sandbox.md "Disputes").
DISPUTE_STATUSES: tuple[DisputeStatus, ...] = (
    "needs_response",
    "under_review",
    "won",
    "lost",
    "warning_needs_response",
    "warning_closed",
)

DisputeType = Literal["chargeback", "inquiry"]
DISPUTE_TYPES: tuple[DisputeType, ...] = ("chargeback", "inquiry")


@dataclass(frozen=True)
class EvidenceRequest:
    """Evidence for a dispute (SPEC §6.2): `request_id` stable across retries; the processor
    dedupes on it (the same id answers the dispute as it is now)."""

    request_id: str
    merchant_id: str
    dispute_id: str  # the processor's dispute id
    text: str  # 1 to 20,000 characters


@dataclass(frozen=True)
class AcceptRequest:
    """The merchant accepts a dispute: a chargeback is lost at once, an inquiry closed."""

    request_id: str
    merchant_id: str
    dispute_id: str


@dataclass(frozen=True)
class DisputeResult:
    """A dispute as the processor reports it (docs/sandbox.md, "Disputes"): the answer of every
    dispute call and the `data` of its webhooks."""

    dispute_id: str
    charge_request_id: str  # the disputed charge's request id: paycore's payment id
    payment_reference: str
    merchant_id: str
    type: str  # DisputeType
    status: str  # DisputeStatus
    reason: str
    amount_minor: int
    currency: str
    fee_minor: int
    evidence_due_by: str  # RFC 3339
    evidence_submitted: bool
    created_at: str
    closed_at: str | None


@dataclass(frozen=True)
class PayoutRequest:
    """A credit transfer to a bank account (SPEC §9 bank rail). Exactly one of `iban`
    (SEPA) or `routing_number` + `account_number` (ACH) is set."""

    request_id: str  # the payout's reference: stable across retries; the bank dedupes on it
    merchant_id: str
    amount_minor: int
    currency: str
    rail: Rail
    beneficiary_name: str
    iban: str | None = None
    bic: str | None = None
    routing_number: str | None = None
    account_number: str | None = None


@dataclass(frozen=True)
class PayoutResult:
    """What the bank says of a payout now. `accepted`: in a batch, not settled yet (the
    payout is irreversible from here); `rejected`: the bank refused it before settlement
    (`failure_code`, an ACH R-code or SEPA reason code), no money left; `settled`: paid to
    the beneficiary; `returned`: paid, then sent back (`return_code`), `return_amount_minor`
    came back (SEPA may deduct charges), `return_fee_minor` charged for it."""

    request_id: str
    status: PayoutStatus
    bank_payout_id: str
    amount_minor: int
    currency: str
    rail: Rail
    batch_id: str | None = None
    fee_minor: int = 0  # the bank's fee for sending, charged at settlement (0 until then)
    failure_code: str | None = None
    return_code: str | None = None
    return_amount_minor: int | None = None
    return_fee_minor: int = 0
    settled_at_us: int | None = None
    returned_at_us: int | None = None


class ProcessorError(Exception):
    """Base of what a processor call can raise."""


class ProcessorUnreachable(ProcessorError, Unreachable):
    """No usable answer: timeout, dropped connection, 5xx. The request may have taken effect."""


class ProcessorRefused(ProcessorError, Refused):
    """The processor answered that it did nothing (bad request, request id reused with other
    parameters). `code` is the processor's stable error code."""

    def __init__(self, code: str, message: str) -> None:
        Refused.__init__(self, code, message)


# The settlement report's columns, in order: its header line (docs/sandbox.md, "The settlement
# report"). What the processor writes and what reconciliation reads.
SETTLEMENT_REPORT_COLUMNS: Final = (
    "type",
    "request_id",
    "processor_id",
    "merchant_id",
    "amount_minor",
    "fee_minor",
    "currency",
    "status",
    "created_at",
    "batch_id",
    "code",
)


class Processor(Protocol):
    """A card processor as paycore sees it. Every method is synchronous and bounded by the
    transport's timeout; none of them ever runs inside a paycore database transaction."""

    def charge(self, request: ChargeRequest) -> ChargeResult: ...

    def get_charge(self, request_id: str) -> ChargeResult | None: ...

    def capture(self, request: CaptureRequest) -> ChargeResult: ...

    def cancel(self, request: CancelRequest) -> ChargeResult: ...

    def refund(self, request: RefundRequest) -> RefundResult: ...

    def get_refund(self, request_id: str) -> RefundResult | None: ...

    def send_payout(self, request: PayoutRequest) -> PayoutResult: ...

    def get_payout(self, request_id: str) -> PayoutResult | None: ...

    def submit_evidence(self, request: EvidenceRequest) -> DisputeResult: ...

    def accept_dispute(self, request: AcceptRequest) -> DisputeResult: ...

    def get_dispute(self, dispute_id: str) -> DisputeResult | None: ...

    def disputes_of_charge(self, charge_request_id: str) -> list[DisputeResult]: ...

    def settlement_report(self, day: str) -> Iterator[str]:
        """The CSV lines (header first) of what the processor did on `day` (YYYY-MM-DD, UTC), each
        with its line end, as text: UTF-8, a byte that is not UTF-8 kept as a lone surrogate
        (`surrogateescape`) for the report's reader to refuse by its line number."""
        ...


class CallsOnLoop(Protocol):
    """A processor whose transport can also make a payment's calls from the event loop, without
    a thread (the HTTP transport to a plain-HTTP processor): the charge, and an authorization's
    capture and cancel (ADR 0029), each with the same request, the same rules, the same answers
    and errors as `Processor.charge`, `capture` and `cancel`, bounded by the same timeout."""

    async def charge_on_loop(self, request: ChargeRequest) -> ChargeResult: ...

    async def capture_on_loop(self, request: CaptureRequest) -> ChargeResult: ...

    async def cancel_on_loop(self, request: CancelRequest) -> ChargeResult: ...


def loop_caller(processor: Processor) -> CallsOnLoop | None:
    """`processor` if it can make its calls from the event loop (its `calls_on_loop` is true),
    else None: they are then made on a worker thread."""
    if getattr(processor, "calls_on_loop", False) is True:
        return processor  # type: ignore[return-value]
    return None
