"""`paycore db distribute` (ADR 0031) refuses, exit code 2 and a message that says why, where
there is no Citus: on SQLite and on plain PostgreSQL, changing nothing, and the database keeps
working; and before `paycore db upgrade` has brought the schema to head."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from typer.testing import CliRunner, Result

from paycore.cli.main import app as cli
from paycore.db import migrate
from paycore.db.engine import Database


@pytest.fixture
def distribute(database_url: str) -> Iterator[CliRunner]:
    patch = pytest.MonkeyPatch()
    patch.setenv("PAYCORE_DATABASE_URL", database_url)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level  # the CLI logs to its (captured) stderr
    try:
        yield CliRunner()
    finally:
        root.handlers[:], root.level = handlers, level
        patch.undo()


def _run(runner: CliRunner) -> tuple[int, str]:
    """The exit code and the output with its line wrapping undone."""
    result: Result = runner.invoke(cli, ["db", "distribute"])
    return result.exit_code, " ".join(result.output.split())


def test_without_citus_it_refuses_with_exit_code_2_and_changes_nothing(
    distribute: CliRunner, database: Database, backend: str
) -> None:
    before = _schema(database)
    exit_code, output = _run(distribute)
    assert exit_code == 2, output
    expected = "this is SQLite" if backend == "sqlite" else "the citus extension is not installed"
    assert f"refused: {expected}" in output
    assert "distributed by" not in output
    assert _schema(database) == before


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_before_the_migrations_it_says_to_run_them_first(distribute: CliRunner, database: Database) -> None:
    with database.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0035'"))
    try:
        exit_code, output = _run(distribute)
    finally:
        with database.engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = :head"), {"head": migrate.HEAD_REVISION})
    assert exit_code == 2, output
    assert "at revision 0035" in output and "run `paycore db upgrade` first" in output


def _schema(database: Database) -> list[tuple[str, ...]]:
    with database.read() as connection:
        if database.is_postgres:
            rows = connection.execute(
                text(
                    "SELECT relname, relkind::text FROM pg_class WHERE relnamespace = 'public'::regnamespace ORDER BY 1"
                )
            )
        else:
            rows = connection.execute(text("SELECT name, type FROM sqlite_master ORDER BY 1"))
        return [tuple(str(value) for value in row) for row in rows]
