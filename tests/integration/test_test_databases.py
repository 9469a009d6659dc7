"""The test databases themselves (tests/support/databases.py): a PostgreSQL database a test is
done with comes back to the next test as empty as the template, under a new name, and one whose
schema a test changed is dropped rather than reused."""

from __future__ import annotations

import psycopg
import pytest

from tests.support import databases

pytestmark = pytest.mark.postgres


def _connect(name: str) -> psycopg.Connection[tuple[object, ...]]:
    return databases._connect(name)


def _exists(name: str) -> bool:
    with psycopg.connect(databases.ADMIN_URL, autocommit=True) as admin:
        return admin.execute("SELECT EXISTS (SELECT FROM pg_database WHERE datname = %s)", [name]).fetchone() == (True,)


def test_a_reused_database_is_as_empty_as_the_template_and_renamed(
    postgres_databases: databases.PostgresDatabases,
) -> None:
    first = postgres_databases.new()
    with _connect(first) as connection:
        connection.execute("INSERT INTO tenants (tenant_id, name, created_at_us) VALUES ('t_left', 'left', 1)")
        connection.execute("DELETE FROM alembic_version")
    left_behind = _connect(first)  # a process the test did not stop
    postgres_databases.release(first)

    with pytest.raises(psycopg.OperationalError):
        left_behind.execute("SELECT 1")  # ended
    with pytest.raises(psycopg.OperationalError):
        _connect(first)  # and the name is gone: it cannot come back
    second = postgres_databases.new()
    try:
        assert second != first
        assert not _exists(first)
        with _connect(second) as connection:
            assert connection.execute("SELECT count(*) FROM tenants").fetchone() == (0,)
            assert connection.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
    finally:
        left_behind.close()
        postgres_databases.release(second)


def test_a_database_whose_schema_a_test_changed_is_dropped(postgres_databases: databases.PostgresDatabases) -> None:
    name = postgres_databases.new()
    with _connect(name) as connection:
        connection.execute("ALTER TABLE tenants ADD COLUMN extra integer")
    free_before = list(postgres_databases._free)
    postgres_databases.release(name)

    assert postgres_databases._free == free_before
    assert not _exists(name)
    assert not _exists(name)


def test_a_database_left_refusing_connections_is_dropped(postgres_databases: databases.PostgresDatabases) -> None:
    name = postgres_databases.new()
    with psycopg.connect(databases.ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    free_before = list(postgres_databases._free)
    postgres_databases.release(name)

    assert postgres_databases._free == free_before
    assert not _exists(name)


def test_a_reused_database_plans_as_a_fresh_copy(postgres_databases: databases.PostgresDatabases) -> None:
    """No pages and no statistics left from the test before: plans are chosen as on a fresh copy."""
    first = postgres_databases.new()
    with _connect(first) as connection:
        connection.execute(
            "INSERT INTO tenants (tenant_id, name, created_at_us)"
            " SELECT 't' || i, 'n', 1 FROM generate_series(1, 500) AS i"
        )
        connection.execute("ANALYZE tenants")
    postgres_databases.release(first)
    second = postgres_databases.new()
    try:
        with _connect(second) as connection:
            assert connection.execute("SELECT pg_relation_size('tenants')").fetchone() == (0,)
            assert connection.execute("SELECT reltuples FROM pg_class WHERE relname = 'tenants'").fetchone() == (-1,)
            stats = connection.execute("SELECT count(*) FROM pg_statistic WHERE starelid = 'tenants'::regclass")
            assert stats.fetchone() == (0,)
    finally:
        postgres_databases.release(second)
