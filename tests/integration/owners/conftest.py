"""The payments fixtures (the sandbox processor and bank rail, in process), for the tests of
who may move a transfer: the transport changes nothing the ledger decides."""

from __future__ import annotations

import pytest

from tests.integration.payments.conftest import env, processor, sandbox

__all__ = ["env", "processor", "sandbox", "transport"]


@pytest.fixture
def transport() -> str:
    return "inprocess"
