"""Every test that touches storage runs on SQLite and on PostgreSQL.

PostgreSQL tests are skipped with a loud reason when no server answers on a developer's
machine, and fail when CI=true or PAYCORE_REQUIRE_POSTGRES=1: in CI they are mandatory.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http.app import create_app
from tests.support import citus_databases, databases, secrets_keys
from tests.support.threads import submitted  # noqa: F401  (a fixture for every test: what went to a worker thread)

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """What `-n auto` means for this suite (pytest-xdist's hook): two workers per core, not one.
    Many tests wait on a server, a subprocess or a timeout, and a second worker per core runs
    meanwhile: on this project's two cores the suite took 7:24 with 2 workers and 5:16-6:12
    (median 5:44) with 4 (docs/benchmarks.md, "The test suite"). `scripts/test` runs `-n auto`."""
    return 2 * len(os.sched_getaffinity(0))


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (the modules, paycore's routes, the test items) lives as long as
    the worker: move it out of the cyclic collector's reach (`gc.freeze`, as
    `paycore serve` does, ADR 0012 decision 5), so that no collection of the run scans it again.

    A worker is client, server and processor at once (a test's sandbox serves it on a thread),
    and a full collection stops all of them: a 2 s processor timeout is the whole process's
    time, not the sandbox's. On this 2-core machine under load (load average 7-11) a full
    collection in a payments worker took 100-210 ms of CPU and up to 1.5 s of wall time, and the
    resolver's status query in test_retries.py once got no answer within its 2 s. With this,
    the same tests' full collections took a quarter to a third less CPU (two runs: mean 102 ->
    66 and 74 ms, largest 208 -> 133 and 141 ms). The thresholds stay Python's: a test's
    garbage, and an unclosed socket's ResourceWarning with it, is found as soon as before."""
    del session
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def sqlite_databases(tmp_path_factory: pytest.TempPathFactory) -> databases.SqliteDatabases:
    return databases.SqliteDatabases(tmp_path_factory.mktemp("sqlite"))


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[databases.PostgresDatabases]:
    reason = databases.postgres_reachable()
    if reason is not None:
        message = f"PostgreSQL is not reachable at {databases.ADMIN_URL}: {reason}"
        if databases.REQUIRE_POSTGRES:
            pytest.fail(message + " (PostgreSQL tests are mandatory here)", pytrace=False)
        pytest.skip(message)
    # PAYCORE_TEST_CITUS=1: PAYCORE_TEST_POSTGRES_URL is a Citus coordinator, every database distributed (.ci/citus)
    pool = citus_databases.CitusDatabases() if databases.CITUS else databases.PostgresDatabases()
    yield pool
    pool.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(
    backend: str, request: pytest.FixtureRequest, sqlite_databases: databases.SqliteDatabases
) -> Iterator[str]:
    postgres = request.getfixturevalue("postgres_databases") if backend == "postgres" else None
    with databases.fresh_url(backend, sqlite_databases, postgres) as url:
        yield url


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, db_pool_size=20, secrets_keys=(secrets_keys.KEY,))


@pytest.fixture
def database(settings: Settings) -> Iterator[Database]:
    db = Database(settings)
    yield db
    db.dispose()


@pytest.fixture
def client(settings: Settings, database: Database) -> Iterator[TestClient]:
    with TestClient(create_app(settings, database)) as test_client:
        yield test_client


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
