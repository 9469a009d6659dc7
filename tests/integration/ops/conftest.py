"""The console's fixtures: the payments environment (sandbox processor, in process), a tenant
with an API key, and people signed in to /ops in browsers of their own (a TestClient each)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paycore.kit.clock import now_us
from paycore.operators import service as operators
from paycore.tenants import service as tenants
from tests.integration.payments.conftest import Env, env, processor, sandbox

__all__ = ["env", "processor", "sandbox"]
_CSRF = re.compile(r'<meta name="csrf-token" content="([0-9a-f]+)">')


@pytest.fixture
def transport() -> str:
    return "inprocess"  # the console does not care which transport the processor sits behind


@dataclass
class Console:
    env: Env
    api_key: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    browsers: list[TestClient] = field(default_factory=list)

    def tenant(self, name: str) -> str:
        made = self.env.database.transaction(lambda c: tenants.create_tenant(c, name, now_us=now_us()))
        return made.api_key

    def operator(self, name: str, role: str, tenant: str | None = None) -> str:
        made = self.env.database.transaction(
            lambda c: operators.create_operator(c, name, role, tenant_id=tenant, now_us=now_us())
        )
        self.tokens[name] = made.token
        return made.token

    def browser(self) -> TestClient:
        client = TestClient(self.env.client.app, follow_redirects=False)
        self.browsers.append(client)
        return client

    def signed_in(self, name: str) -> TestClient:
        client = self.browser()
        response = client.post("/ops/login", data={"name": name, "token": self.tokens[name]})
        assert response.status_code == 303, response.text
        return client


def csrf_of(client: TestClient, path: str = "/ops") -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = _CSRF.search(page.text)
    assert found is not None, page.text[:500]
    return found.group(1)


def act(client: TestClient, path: str, data: dict[str, Any] | None = None, *, page: str = "/ops") -> Any:
    """POST a console form as the page does: with the page's CSRF token."""
    return client.post(path, data={"csrf_token": csrf_of(client, page), **(data or {})})


@pytest.fixture
def console(env: Env) -> Iterator[Console]:
    """Tenant `acme` with an API key (env.client uses it), and operators: alice (operator),
    bob and carol (approvers), vic (viewer), all across tenants."""
    made = Console(env)
    made.api_key = made.tenant("acme")
    env.client.headers["Authorization"] = f"Bearer {made.api_key}"
    for name, role in (("alice", "operator"), ("bob", "approver"), ("carol", "approver"), ("vic", "viewer")):
        made.operator(name, role)
    yield made
    for client in made.browsers:
        client.close()
