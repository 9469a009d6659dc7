"""The payments fixtures (the sandbox processor behind both transports), for reconciliation;
every test here starts clear of midnight (tests/support/days.py: they read today's report)."""

from __future__ import annotations

import pytest

from tests.integration.payments.conftest import env, processor, sandbox, transport
from tests.support.days import clear_of_midnight

__all__ = ["env", "processor", "sandbox", "transport"]


@pytest.fixture(autouse=True)
def _clear_of_midnight() -> None:
    clear_of_midnight()
