"""Fixtures of the HTTP tests beyond the suite's own (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from paycore.config import Settings
from paycore.db.engine import Database
from paycore_sandbox.inprocess import InProcessTransport
from paycore_sandbox.service import Sandbox
from tests.support import databases

SANDBOX_TIMEOUT_MS = 2000  # generous: a loaded CI machine must not turn a slow answer into in_doubt


@pytest.fixture
def other(
    backend: str, request: pytest.FixtureRequest, sqlite_databases: databases.SqliteDatabases, settings: Settings
) -> Iterator[tuple[Settings, Database]]:
    """A second fresh database of the same backend, with the same settings but its URL."""
    postgres = request.getfixturevalue("postgres_databases") if backend == "postgres" else None
    with databases.fresh_url(backend, sqlite_databases, postgres) as url:
        other_settings = dataclasses.replace(settings, database_url=url)
        database = Database(other_settings)
        yield other_settings, database
        database.dispose()


@pytest.fixture
def sandboxes(tmp_path: Path) -> Iterator[tuple[InProcessTransport, InProcessTransport]]:
    """Two sandbox processors in this process, each with its own store: for an app with a thin
    edge and one without (`other`'s)."""
    boxes = [Sandbox.open(f"sqlite:///{tmp_path / name}.db") for name in ("edge", "route")]
    edge, route = (InProcessTransport(box, timeout_ms=SANDBOX_TIMEOUT_MS) for box in boxes)
    yield edge, route
    for box in boxes:
        box.close()
