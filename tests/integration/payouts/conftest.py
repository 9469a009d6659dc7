"""The payments fixtures (the sandbox processor and bank rail behind both transports)."""

from __future__ import annotations

from tests.integration.payments.conftest import env, processor, sandbox, transport

__all__ = ["env", "processor", "sandbox", "transport"]
