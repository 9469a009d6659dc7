"""The payments fixtures (the sandbox processor behind both transports), for the webhook's tests."""

from __future__ import annotations

from tests.integration.payments.conftest import env, processor, sandbox, transport

__all__ = ["env", "processor", "sandbox", "transport"]
