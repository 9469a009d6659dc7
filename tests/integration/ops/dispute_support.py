"""Helpers of the console's dispute tests: disputes opened by the real sandbox (its admin call)
and recorded by paycore from its webhooks, the pages' rows, the audit records of a dispute."""

from __future__ import annotations

import dataclasses
import html
import re
from typing import Any

from paycore.audit import service as audit
from paycore.audit.service import Event
from paycore.disputes import service as disputes
from tests.integration.disputes.support import disputes_of, open_at_sandbox, paid
from tests.integration.ops.conftest import Console, act

DAY_MS = 86_400_000
_ROW_ID = re.compile(r'<tr>\s*<td><a href="/ops/disputes/(dp_[0-9A-Za-z]+)">')


def opened(console: Console, amount_minor: int = 5000, window_ms: int = 7 * DAY_MS) -> dict[str, Any]:
    """A chargeback on a new payment, its evidence due `window_ms` after it opens, as the API
    shows it once paycore recorded the sandbox's `dispute.created`. The network decides evidence
    a day after it came, not the sandbox's default second: a console test reads the dispute
    `under_review` after answering it, and on a loaded machine a second passes between the two
    (a status query then finds it already won)."""
    env = console.env
    env.sandbox.settings = dataclasses.replace(
        env.sandbox.settings, dispute_evidence_window_ms=window_ms, dispute_decision_after_ms=DAY_MS
    )
    payment = paid(env, env.account(), amount_minor)
    open_at_sandbox(env, payment)
    assert env.deliver() >= 1  # dispute.created
    [listed] = disputes_of(env, payment["id"])
    assert listed["status"] == "needs_response", listed
    return listed


def text_of(client: Any, path: str, status: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == status, response.text[:2000]
    return html.unescape(response.text)


def row_ids(text: str) -> list[str]:
    return _ROW_ID.findall(text)


def flash_of(text: str) -> str:
    found = re.search(r'<div class="flash[^"]*" role="(?:status|alert)">(.*?)</div>', text, re.S)
    assert found is not None, text[:2000]
    return html.unescape(found.group(1))


def page(dispute_id: str) -> str:
    return f"/ops/disputes/{dispute_id}"


def evidence_form(client: Any, dispute_id: str, text: str, key: str) -> Any:
    return act(client, f"{page(dispute_id)}/evidence", {"text": text, "idempotency_key": key}, page=page(dispute_id))


def accept_form(client: Any, dispute_id: str, key: str) -> Any:
    return act(client, f"{page(dispute_id)}/accept", {"idempotency_key": key}, page=page(dispute_id))


def approve_form(client: Any, dispute_id: str) -> Any:
    return act(client, f"{page(dispute_id)}/accept/approve", page=page(dispute_id))


def followed(client: Any, response: Any) -> str:
    """The page a 303 leads to."""
    assert response.status_code == 303, response.text[:2000]
    return text_of(client, response.headers["location"])


def records(console: Console, dispute: dict[str, Any]) -> list[Event]:
    """The dispute's audit records, oldest first (its tenant's: acme)."""
    env = console.env
    with env.database.read() as connection:
        tenant_id = _tenant_of(connection, dispute["id"])
        return audit.events_of(connection, tenant_id, dispute["id"], limit=500)


def calls(console: Console, dispute: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, outcome, actor) of each call to the processor about the dispute."""
    return [(e.type, e.cause, e.actor) for e in records(console, dispute) if e.kind == "processor_call"]


def _tenant_of(connection: Any, dispute_id: str) -> str:
    found = disputes.find_any(connection, dispute_id, tenant_id=None)
    assert found is not None, dispute_id
    return found.tenant_id
