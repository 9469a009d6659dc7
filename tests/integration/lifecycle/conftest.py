"""The console's fixtures (the sandbox processor in process, tenants with API keys, people
signed in to /ops), for the rounds that meet an item they cannot move."""

from __future__ import annotations

from tests.integration.ops.conftest import console, env, processor, sandbox, transport

__all__ = ["console", "env", "processor", "sandbox", "transport"]
