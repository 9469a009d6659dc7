"""Disputes against the real sandbox processor, through both transports, on both databases:
the payments' environment (`tests/integration/payments/conftest.py`), whose webhooks the tests
deliver when they choose."""

from __future__ import annotations

from tests.integration.payments.conftest import env, processor, sandbox, transport

__all__ = ["env", "processor", "sandbox", "transport"]
