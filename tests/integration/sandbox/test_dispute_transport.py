"""paycore's HttpTransport speaks the sandbox's dispute calls (docs/sandbox.md "Disputes"): the
port's request and result types over HTTP, the sandbox's error codes as refusals, a dispute
unknown as None, and an answer that does not read as a dispute as no answer."""

from __future__ import annotations

import dataclasses

import pytest

from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import (
    AcceptRequest,
    ChargeRequest,
    DisputeResult,
    EvidenceRequest,
    ProcessorRefused,
    ProcessorUnreachable,
)
from paycore_sandbox import Sandbox
from paycore_sandbox.disputes import OpenDisputeRequest
from tests.integration.sandbox.conftest import RecordingSink, StartServer

MERCHANT = "merchant_1"


@pytest.fixture
def base_url(sandbox: Sandbox, sink: RecordingSink, serve_sandbox: StartServer) -> str:
    return serve_sandbox(sandbox, sink)


def opened(sandbox: Sandbox, transport: HttpTransport) -> DisputeResult:
    charged = transport.charge(ChargeRequest("pay_1", MERCHANT, 5000, "USD", "tok_ok"))
    return sandbox.open_dispute(OpenDisputeRequest(charged.processor_charge_id))


def test_evidence_accept_and_reads_over_http(base_url: str, sandbox: Sandbox) -> None:
    transport = HttpTransport(base_url)
    dispute = opened(sandbox, transport)
    assert transport.get_dispute(dispute.dispute_id) == dispute
    assert transport.disputes_of_charge("pay_1") == [dispute]
    assert transport.disputes_of_charge("pay_unknown") == []
    assert transport.get_dispute("dp_sbx_unknown") is None
    evidence = EvidenceRequest("ev_1", MERCHANT, dispute.dispute_id, "winning_evidence")
    answered = transport.submit_evidence(evidence)
    assert (answered.status, answered.evidence_submitted) == ("under_review", True)
    assert transport.submit_evidence(evidence) == answered  # the same request id: the dispute as it is
    with pytest.raises(ProcessorRefused) as refused:
        transport.accept_dispute(AcceptRequest("ac_1", MERCHANT, dispute.dispute_id))
    assert refused.value.code == "dispute_not_open"
    with pytest.raises(ProcessorRefused) as reused:
        transport.submit_evidence(dataclasses.replace(evidence, text="losing_evidence"))
    assert reused.value.code == "request_id_reused"


def test_an_answer_that_does_not_read_as_a_dispute_is_unreachable(
    base_url: str, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = HttpTransport(base_url)
    dispute = opened(sandbox, transport)
    broken: list[DisputeResult] = [
        dataclasses.replace(dispute, amount_minor="5000"),  # type: ignore[arg-type]
        dataclasses.replace(dispute, fee_minor=True),
        dataclasses.replace(dispute, status="open"),
        dataclasses.replace(dispute, type="retrieval"),
        dataclasses.replace(dispute, evidence_submitted=0),  # type: ignore[arg-type]
    ]
    for answer in broken:
        monkeypatch.setattr(sandbox, "get_dispute", lambda _dispute_id, answer=answer: answer)
        with pytest.raises(ProcessorUnreachable, match="does not read as a dispute"):
            transport.get_dispute(dispute.dispute_id)
