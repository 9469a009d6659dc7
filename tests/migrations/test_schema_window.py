"""Which schemas this code serves on (docs/migrations.md): at head, or anywhere from
OLDEST_COMPATIBLE_REVISION to head (an expand/backfill/contract window a rolling deploy
passes through), or ahead of it (a newer release migrated first); never behind it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from tests.migrations import test_migrations

empty_database = test_migrations.empty_database  # the fixture: a database with no tables at all


def readyz(database: Database) -> tuple[int, str]:
    settings = Settings(database_url=database.engine.url.render_as_string(hide_password=False))
    with TestClient(create_app(settings, database)) as client:
        response = client.get("/readyz")
    return response.status_code, str(response.json()["migrations"])


@pytest.mark.parametrize(
    ("revision", "state", "status"),
    [
        ("0003", "behind", 503),
        ("0004", "behind", 503),
        ("0005", "behind", 503),
        ("0009", "behind", 503),
        ("0010", "behind", 503),  # no invariant tables yet: this release's /metrics and worker need 0011
        ("0011", "behind", 503),  # `resolve_attempts`: this release reads the work columns by one name (0012)
        ("0012", "behind", 503),  # no reconciliation tables: this release's /metrics reads them (0013)
        ("0013", "behind", 503),  # this release's reconciliation leases days and books fees (0014)
        ("0017", "behind", 503),  # this release marks reconciliation runs `abandoned` (0018)
        ("0018", "behind", 503),  # this release writes a ledger batch by 0019's function
        ("0020", "behind", 503),  # this release writes 0021-0023's columns and tables
        ("0022", "behind", 503),  # this release counts failed sign-ins in 0023's table
        ("0023", "behind", 503),  # this release reads and writes 0033's capture columns with every payment
        ("0031", "behind", 503),  # the same: the window is 0033 alone (docs/migrations.md, "0033")
        ("0032", "behind", 503),  # the same (0032 only adds the webhook's receive function)
        ("0033", "behind", 503),  # this release stores every payment with 0035's disputed_minor
        ("0034", "behind", 503),  # the same (0034 only adds the open authorizations' index)
        ("0035", "behind", 503),  # this release keeps a dispute answer whose reply was lost in 0038's table
        ("0036", "behind", 503),  # the same
        ("0037", "behind", 503),  # the same (0037 only reorders a unique key and adds an index)
        ("0038", "compatible", 200),  # 0039 only adds and replaces functions (42883: the reference path)
        ("0039", "compatible", 200),  # 0040-0041 add indexes, 0042-0043 functions (42883: the reference path)
        ("head", "current", 200),
    ],
)
def test_the_schema_window(empty_database: Database, revision: str, state: str, status: int) -> None:
    migrate.upgrade(empty_database, revision)
    assert migrate.schema_state(empty_database) == state
    assert migrate.is_usable(empty_database) is (state != "behind")
    assert readyz(empty_database) == (status, state)


@pytest.mark.parametrize(("revision", "state", "status"), [("0004", "behind", 503), ("0005", "compatible", 200)])
def test_a_window_below_head_is_compatible(
    empty_database: Database, monkeypatch: pytest.MonkeyPatch, revision: str, state: str, status: int
) -> None:
    """The window itself, with the oldest revision the release of migrations 0005-0007 declared:
    this release's window is empty (its oldest compatible revision is its head)."""
    monkeypatch.setattr(migrate, "OLDEST_COMPATIBLE_REVISION", "0005")
    migrate.upgrade(empty_database, revision)
    assert migrate.schema_state(empty_database) == state
    assert migrate.is_usable(empty_database) is (state != "behind")


def test_a_revision_this_code_does_not_know_is_ahead(empty_database: Database) -> None:
    migrate.upgrade(empty_database)
    with empty_database.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    assert migrate.schema_state(empty_database) == "ahead"
    assert readyz(empty_database) == (200, "ahead")


def test_an_empty_database_is_behind(empty_database: Database) -> None:
    assert migrate.schema_state(empty_database) == "behind"


def test_a_credit_on_the_oldest_compatible_schema(empty_database: Database) -> None:
    """Before 0026 there is no `paycore_credits_create` (PostgreSQL): the credit is written by
    the reference path, and once migrated by the one call; both are one credit each."""
    migrate.upgrade(empty_database, migrate.OLDEST_COMPATIBLE_REVISION)
    settings = Settings(database_url=empty_database.engine.url.render_as_string(hide_password=False))
    body = {"idempotency_key": "k1", "lines": [{"desc": "a", "amount_minor": 5, "currency": "USD"}]}
    with TestClient(create_app(settings, empty_database)) as client:
        first = client.post("/v1/tenants/acme/credits", json=body)
        assert first.status_code == 201, first.text
        migrate.upgrade(empty_database)
        second = client.post("/v1/tenants/acme/credits", json={**body, "idempotency_key": "k2"})
        assert second.status_code == 201, second.text
        assert client.post("/v1/tenants/acme/credits", json=body).json() == first.json()
        assert client.get("/v1/tenants/acme/balance").json() == {"currency": "USD", "amount_minor": 10}
    with empty_database.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM credits")).scalar_one() == 2
