"""Take a test's own PostgreSQL database away and give it back, as an outage does: refuse new
connections and end the existing ones (issue 29), from a connection to another database."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from sqlalchemy import make_url

from tests.support.databases import ADMIN_URL


def database_name(url: str) -> str:
    name = make_url(url).database
    assert name, url
    return name


_TERMINATE_PASSES_MAX = 60
_TERMINATE_PAUSE_S = 0.05
_QUIET_PASSES = 6  # consecutive passes that find no backend: about 0.3 s with none arriving


def refuse_connections(url: str) -> int:
    """`ALTER DATABASE ... ALLOW_CONNECTIONS false`, then end every backend on it, again until
    several passes in a row find none (a connection that was past the check when the ALTER
    committed still arrives, later on a loaded machine). Returns how many were ended."""
    name = database_name(url)
    ended = 0
    quiet = 0
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        for _ in range(_TERMINATE_PASSES_MAX):
            row = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchone()
            count = int(row[0]) if row else 0
            ended += count
            quiet = quiet + 1 if count == 0 else 0
            if quiet >= _QUIET_PASSES:
                return ended
            time.sleep(_TERMINATE_PAUSE_S)
    raise AssertionError(f"backends kept arriving on {name} after {_TERMINATE_PASSES_MAX} passes")


def allow_connections(url: str) -> None:
    name = database_name(url)
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name)))


@contextmanager
def database_away(url: str) -> Iterator[None]:
    """The database refuses connections inside the block and takes them again after it."""
    refuse_connections(url)
    try:
        yield
    finally:
        allow_connections(url)


def terminate_backend(pid: int) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
