"""The in-process transport: the provider port answered by a `Sandbox` in this process.

The sandbox's fault plan is applied here as a network would apply it, so business code sees
the same failures as over HTTP, without sockets and without the server's hold:
- `drop_request`, `error_500`: nothing is processed; `ProcessorUnreachable` at once.
- `drop_response` (and every answer to a `tok_timeout` charge): processed, then
  `ProcessorUnreachable` at once.
- `delay_ms`: processed; the answer comes after `delay_ms`, or, if that is `timeout_ms` or
  more, the caller gives up after `timeout_ms` with `ProcessorUnreachable` (the effect stays).
A busy sandbox database is a 5xx by another name: `ProcessorUnreachable`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from paycore.db.engine import DatabaseBusy
from paycore.processor.port import (
    CancelRequest,
    CaptureRequest,
    ChargeRequest,
    ChargeResult,
    PayoutRequest,
    PayoutResult,
    ProcessorRefused,
    ProcessorUnreachable,
    RefundRequest,
    RefundResult,
)
from paycore_sandbox.disputes import AcceptRequest, DisputeResult, EvidenceRequest, OpenDisputeRequest
from paycore_sandbox.faults import Decision, Op
from paycore_sandbox.service import Sandbox

T = TypeVar("T")


class InProcessTransport:
    def __init__(self, sandbox: Sandbox, timeout_ms: int = 5_000) -> None:
        assert timeout_ms >= 1
        self.sandbox = sandbox
        self.timeout_ms = timeout_ms

    def charge(self, request: ChargeRequest) -> ChargeResult:
        decision = self.sandbox.decide("charge")
        lost = self.sandbox.answer_lost(request)
        return self._call("charge", decision, lambda: self.sandbox.charge(request, decision), answer_lost=lost)

    def capture(self, request: CaptureRequest) -> ChargeResult:
        decision = self.sandbox.decide("capture")
        return self._call("capture", decision, lambda: self.sandbox.capture(request, decision))

    def cancel(self, request: CancelRequest) -> ChargeResult:
        decision = self.sandbox.decide("cancel")
        return self._call("cancel", decision, lambda: self.sandbox.cancel(request, decision))

    def get_charge(self, request_id: str) -> ChargeResult | None:
        decision = self.sandbox.decide("get_charge")
        return self._call("get_charge", decision, lambda: self.sandbox.get_charge(request_id))

    def refund(self, request: RefundRequest) -> RefundResult:
        decision = self.sandbox.decide("refund")
        return self._call("refund", decision, lambda: self.sandbox.refund(request, decision))

    def get_refund(self, request_id: str) -> RefundResult | None:
        decision = self.sandbox.decide("get_refund")
        return self._call("get_refund", decision, lambda: self.sandbox.get_refund(request_id))

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        decision = self.sandbox.decide("payout")
        return self._call("payout", decision, lambda: self.sandbox.send_payout(request, decision))

    def get_payout(self, request_id: str) -> PayoutResult | None:
        decision = self.sandbox.decide("get_payout")
        return self._call("get_payout", decision, lambda: self.sandbox.get_payout(request_id))

    # Disputes: the sandbox's calls of its own (paycore's port has none yet), faulted alike.

    def open_dispute(self, request: OpenDisputeRequest) -> DisputeResult:
        decision = self.sandbox.decide("dispute_open")
        return self._call("dispute_open", decision, lambda: self.sandbox.open_dispute(request, decision))

    def submit_evidence(self, request: EvidenceRequest) -> DisputeResult:
        decision = self.sandbox.decide("dispute_evidence")
        return self._call("dispute_evidence", decision, lambda: self.sandbox.submit_evidence(request, decision))

    def accept_dispute(self, request: AcceptRequest) -> DisputeResult:
        decision = self.sandbox.decide("dispute_accept")
        return self._call("dispute_accept", decision, lambda: self.sandbox.accept_dispute(request, decision))

    def get_dispute(self, dispute_id: str) -> DisputeResult | None:
        decision = self.sandbox.decide("get_dispute")
        return self._call("get_dispute", decision, lambda: self.sandbox.get_dispute(dispute_id))

    def disputes_of_charge(self, charge_request_id: str) -> list[DisputeResult]:
        decision = self.sandbox.decide("get_dispute")
        return self._call("get_dispute", decision, lambda: self.sandbox.disputes_of_charge(charge_request_id))

    def settlement_report(self, day: str) -> Iterator[str]:
        return self.sandbox.settlement_report(day)

    def _call(self, op: Op, decision: Decision, work: Callable[[], T], *, answer_lost: bool = False) -> T:
        if decision.transport == "drop_request":
            raise ProcessorUnreachable(f"{op}: the request was lost (sandbox fault drop_request)")
        if decision.transport == "error_500":
            raise ProcessorUnreachable(f"{op}: the processor answered 500 (sandbox fault error_500)")
        refusal: ProcessorRefused | None = None
        try:
            answer = work()
        except ProcessorRefused as error:
            refusal = error
        except DatabaseBusy as error:
            raise ProcessorUnreachable(f"{op}: the processor is busy ({error})") from error
        if decision.transport == "drop_response" or (answer_lost and refusal is None):
            raise ProcessorUnreachable(f"{op}: the answer was lost (the request was processed)")
        if decision.transport == "delay_ms":
            self._wait(op, decision.delay_ms)
        if refusal is not None:
            raise refusal
        return answer

    def _wait(self, op: Op, delay_ms: int) -> None:
        if delay_ms >= self.timeout_ms:
            time.sleep(self.timeout_ms / 1000)
            raise ProcessorUnreachable(f"{op}: no answer within {self.timeout_ms} ms (the request was processed)")
        time.sleep(delay_ms / 1000)
