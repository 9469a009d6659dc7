"""Fixtures of the HTTP tests beyond the suite's own (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from paycore.config import Settings
from paycore.db.engine import Database
from tests.support import databases


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
