"""The console's search (`/ops/search`) finds an id, a reference or an idempotency key by index
lookups, never a scan of the history, on either database: the money path's flows run once (a
payment, refunds, payouts, a chargeback), their rows copied `COPIES` times, then every searched
column of each kind is searched, in the tenant and across every tenant, and each read of a money
table must be an index searched by equality on the searched column (migration 0041's indexes), not
by the tenant alone. The metadata window's
read is bounded by its LIMIT (`METADATA_WINDOW_ROWS`) and left out here."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from paycore.http.console import search
from tests.integration.payments.conftest import Env
from tests.integration.plans import capture
from tests.integration.plans.test_money_path_plans import TENANT, Flows, _analyze
from tests.support.history import add_history

COPIES = 300
SEARCHED = ("payments", "refunds", "payouts", "disputes")


def _values(env: Env) -> list[tuple[str, str]]:
    """(kind, a value of each searched column of one row of the kind)."""
    found: list[tuple[str, str]] = []
    with env.database.read() as connection:
        for plural, columns in search.COLUMNS.items():
            names = ", ".join(column for column, _ in columns)
            where = " AND ".join(f"{column} IS NOT NULL" for column, _ in columns)
            row = connection.execute(text(f"SELECT {names} FROM {plural} WHERE {where} LIMIT 1")).first()
            assert row is not None, plural
            found.extend((plural, str(value)) for value in row)
    return found


def _unique_references(env: Env) -> None:
    """A reference names one charge, refund or bank transfer; the history's copies keep theirs
    (`tests/support/history.py` suffixes ids and keys only), which would make each of them a
    value of hundreds of rows: each copy's reference gets the copy's id appended, as a real one differs."""
    with env.database.engine.begin() as connection:
        for table, column in (
            ("payments", "processor_reference"),
            ("refunds", "processor_reference"),
            ("payouts", "bank_reference"),
        ):
            update = f"UPDATE {table} SET {column} = {column} || '~' || id WHERE id LIKE :copy ESCAPE '!'"
            connection.execute(text(update), {"copy": "%!_h%"})


@pytest.mark.parametrize("transport", ["inprocess"], indirect=True)
@pytest.mark.parametrize("statistics", ["as migrated", "analyzed"])
def test_every_search_by_id_reference_or_key_is_an_index_lookup(env: Env, statistics: str) -> None:
    flows = Flows(env)
    for flow in flows.all().values():
        flow()
    add_history(env.database, TENANT, COPIES)
    _unique_references(env)
    if statistics == "analyzed":
        _analyze(env.database)
    env.database.engine.dispose()
    values = _values(env)
    plans = ["generic", "custom"] if env.database.is_postgres else ["sqlite"]
    problems: list[str] = []
    for plan in plans:
        for kind, value in values:
            for tenant_id in (TENANT, None):
                with capture.reads(env.database, plan) as found, env.database.read() as connection:
                    groups = search.find(connection, value, tenant_id)
                assert groups.get(kind), (kind, value, tenant_id)  # the copies hold it too, under new ids
                for read in found:
                    if read.table not in SEARCHED or " LIKE " in read.statement:
                        continue
                    if read.built or read.index is None or not read.searched or not read.equal - {"tenant_id"}:
                        problems.append(f"{plan} {kind} {value} {tenant_id}: {read.detail} in {read.statement[:300]}")
    assert not problems, "\n".join(problems)
