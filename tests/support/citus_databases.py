"""Fresh distributed databases for tests on a Citus coordinator (ADR 0031), when
PAYCORE_TEST_CITUS=1 and PAYCORE_TEST_POSTGRES_URL names the coordinator (`.ci/citus`).

Citus does not copy a database from a template across nodes, so each database is made as an
operator would: `CREATE DATABASE` and `CREATE EXTENSION citus` on every node, the workers added
on the coordinator, `paycore db upgrade`, then `paycore db distribute` (every tenant table
distributed by tenant_id, the server functions delegated). That costs seconds, so a database a
test is done with is reused: its backends ended, every shard emptied on its node (the
append-only triggers off, as on a replica) and the migrations' own rows put back, if its schema
is still as made (`databases._fingerprint`); else it is dropped on every node.

Tables get `SHARDS` shards each (Citus's default is 32): still spread over both workers, so a
tenant's rows live on one of them and another tenant's on the other, but emptying all of them
between tests takes a fraction of the time.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from paycore.config import Settings
from paycore.db import distribute, migrate
from paycore.db.engine import Database
from tests.support import databases

SHARDS = 4
# A node's DROP ... WITH (FORCE) refused because a session came back while it waited.
_DROP_ATTEMPTS_MAX = 5
_DROP_RETRY_S = 1
# Tables the migrations fill; alembic_version is the coordinator's own and never emptied.
_KEPT = frozenset(distribute.COORDINATOR_TABLES)
_PLACED = "SELECT logicalrelid::regclass::text FROM pg_dist_partition ORDER BY 1"
# Every shard placement by node (the coordinator holds a copy of each reference table).
_PLACEMENTS = "SELECT nodename, nodeport, array_agg(shard_name::text) FROM citus_shards GROUP BY 1, 2"


def _url(port_url: str, name: str) -> str:
    base, _, _ = port_url.rpartition("/")
    return f"{base}/{name}"


class CitusDatabases(databases.PostgresDatabases):
    """The interface of `PostgresDatabases`, on a coordinator and its workers."""

    def __init__(self) -> None:  # no template: see the module's docstring
        self._count = 0
        self._free: list[str] = []
        self._made: dict[str, tuple[str, dict[str, bytes]]] = {}  # name: (fingerprint, rows)
        with psycopg.connect(databases.ADMIN_URL, autocommit=True) as admin:
            workers = admin.execute(
                "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'"
                " ORDER BY nodeid"
            ).fetchall()
        if not workers:
            raise RuntimeError(f"{databases.ADMIN_URL} has no Citus workers (pg_dist_node): run scripts/citus up")
        self.workers = [(str(host), int(str(port))) for host, port in workers]
        base, _, _ = databases.ADMIN_URL.rpartition("/")
        scheme, _, _ = base.rpartition("@")
        self._admin_urls = [databases.ADMIN_URL] + [f"{scheme}@{host}:{port}/postgres" for host, port in self.workers]

    def new(self) -> str:
        if self._free:
            return self._free.pop()
        self._count += 1
        name = f"{databases.RUN_ID}_c{self._count}"
        self._create(name)
        return name

    def _create(self, name: str) -> None:
        for admin_url in self._admin_urls:
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                admin.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name)))
            with psycopg.connect(_url(admin_url, name), autocommit=True) as node:
                node.execute("CREATE EXTENSION citus")
        with psycopg.connect(_url(databases.ADMIN_URL, name), autocommit=True) as coordinator:
            host, port = _host_port(databases.ADMIN_URL)
            coordinator.execute("SELECT citus_set_coordinator_host(%s, %s)", [host, port])
            for worker_host, worker_port in self.workers:
                coordinator.execute("SELECT citus_add_node(%s, %s)", [worker_host, worker_port])
            coordinator.execute(
                sql.SQL("ALTER DATABASE {} SET citus.shard_count = {}").format(
                    sql.Identifier(name), sql.Literal(SHARDS)
                )
            )
        database = Database(Settings(database_url=databases.sqlalchemy_url(name), db_pool_size=2))
        try:
            migrate.upgrade(database)
            distribute.distribute(database, lambda _line: None)
        finally:
            database.dispose()
        with psycopg.connect(_url(databases.ADMIN_URL, name), autocommit=True) as coordinator:
            self._made[name] = (databases._fingerprint(coordinator), _rows(coordinator))

    def release(self, name: str) -> None:
        """Empty `name` for the next test, or drop it if the test changed more than its rows."""
        with psycopg.connect(databases.ADMIN_URL, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [name],
            )
        if self._reset(name):
            self._free.append(name)
        else:
            self.drop(name)

    def _reset(self, name: str) -> bool:
        fingerprint, rows = self._made[name]
        try:
            with psycopg.connect(_url(databases.ADMIN_URL, name), autocommit=True) as coordinator:
                if databases._fingerprint(coordinator) != fingerprint:
                    return False
                placements = coordinator.execute(_PLACEMENTS).fetchall()
                for host, port, shards in placements:
                    _empty(f"{databases.ADMIN_URL.split('@', 1)[0]}@{host}:{port}/{name}", list(shards))
                for table, data in rows.items():
                    with coordinator.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as copy:
                        copy.write(data)
        except psycopg.Error:
            return False
        return True

    def drop(self, name: str) -> None:  # type: ignore[override]  # per node, not one server's
        """Drop `name` on the coordinator first: its Citus maintenance daemon opens connections
        to the workers' copy (two-phase commit recovery) and could open one again while a
        worker's `WITH (FORCE)` waits for its sessions to end, so that waits its turn too."""
        self._made.pop(name, None)
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        for admin_url in self._admin_urls:
            for attempt in range(_DROP_ATTEMPTS_MAX):
                try:
                    with psycopg.connect(admin_url, autocommit=True) as admin:
                        admin.execute(statement)
                    break
                except psycopg.errors.ObjectInUse:
                    if attempt == _DROP_ATTEMPTS_MAX - 1:
                        raise
                    time.sleep(_DROP_RETRY_S)

    def close(self) -> None:
        for name in list(self._made):
            self.drop(name)
        self._free.clear()


def _host_port(url: str) -> tuple[str, int]:
    location = url.split("@", 1)[1].split("/", 1)[0]
    host, _, port = location.partition(":")
    return host, int(port or 5432)


def _empty(node_url: str, shards: list[str]) -> None:
    """Empty the shards on one node, its triggers off as on a replica (paycore's append-only
    triggers refuse a DELETE). Not through the coordinator: Citus sends a TRUNCATE to the shards
    from a trigger of its own, which a replica's session does not fire. A DELETE, not a TRUNCATE:
    a TRUNCATE makes new files for every shard and its indexes, seconds a node; a test's few
    rows are deleted in milliseconds."""
    with psycopg.connect(node_url, autocommit=True) as node, node.transaction():
        node.execute("SET LOCAL session_replication_role = replica")
        node.execute("SET LOCAL citus.enable_manual_changes_to_shards = on")
        node.execute("; ".join(f"DELETE FROM {shard}" for shard in shards))


def _rows(connection: psycopg.Connection[tuple[object, ...]]) -> dict[str, bytes]:
    """The rows the migrations left in the placed tables, to put back after each test."""
    rows: dict[str, bytes] = {}
    for (table,) in connection.execute(_PLACED).fetchall():
        if str(table) in _KEPT or connection.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None:
            continue
        with connection.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as copy:
            rows[str(table)] = b"".join(bytes(block) for block in copy)
    return rows
