"""The loss report's fixture set (world.py), written once per test on a fresh database."""

from __future__ import annotations

import pytest

from paycore.db.engine import Database
from tests.integration.reports import world


@pytest.fixture
def ids(database: Database) -> dict[str, str]:
    """The fixture set, built through the service code; the payout ids by name."""
    return world.build(database)
