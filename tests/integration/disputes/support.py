"""Helpers of the dispute tests: a disputed payment, the sandbox's webhooks caught and sent
to paycore in any order, the books' problems."""

from __future__ import annotations

from typing import Any

from paycore.invariants import service as invariants
from paycore.kit.clock import now_us
from paycore.ledger import service as ledger
from paycore_sandbox.disputes import EvidenceRequest, OpenDisputeRequest
from tests.integration.payments.conftest import Env

TENANT = "default"
LATER_US = 2_500_000  # past the sandbox's one-second steps (dispute_open_after_ms, the decision)

Webhook = tuple[bytes, dict[str, str]]


def paid(env: Env, merchant: str, amount_minor: int = 5000, token: str = "tok_ok") -> dict[str, Any]:
    response = env.pay(merchant, token=token, amount_minor=amount_minor)
    assert response.status_code == 201, response.text
    env.deliver()  # the charge's own events first
    return dict(response.json())


def open_at_sandbox(env: Env, payment: dict[str, Any], **kwargs: Any) -> str:
    """A chargeback (or what `kwargs` say) opened by the sandbox's admin call; its dispute id."""
    return env.sandbox.open_dispute(OpenDisputeRequest(payment["processor_reference"], **kwargs)).dispute_id


def evidence_at_sandbox(env: Env, dispute_id: str, text: str, request_id: str = "ev_1") -> None:
    env.sandbox.submit_evidence(EvidenceRequest(request_id, TENANT, dispute_id, text))


def caught(env: Env, at_us: int | None = None) -> list[Webhook]:
    """Every due sandbox webhook, taken (answered 200) without reaching paycore."""
    bodies: list[Webhook] = []

    def sink(body: bytes, headers: dict[str, str]) -> int:
        bodies.append((body, dict(headers)))
        return 200

    env.sandbox.deliver_due(sink, at_us)
    return bodies


def send(env: Env, webhook: Webhook) -> int:
    body, headers = webhook
    return int(env.client.post("/v1/webhooks/processor", content=body, headers=headers).status_code)


def later() -> int:
    return now_us() + LATER_US


def disputes_of(env: Env, payment_id: str) -> list[dict[str, Any]]:
    response = env.client.get("/v1/disputes", params={"payment_id": payment_id})
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def dispute(env: Env, dispute_id: str) -> dict[str, Any]:
    response = env.client.get(f"/v1/disputes/{dispute_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def posted(env: Env, account_id: str) -> int:
    return int(env.balance(account_id)["posted_minor"])


def problems(env: Env) -> list[str]:
    with env.database.read() as connection:
        return [*ledger.verify(connection).problems, *invariants.verify_books(connection)]
