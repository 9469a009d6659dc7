"""insert_or_ignore runs on the driver: it inserts once, reports a conflict as False, and
refuses columns the driver could not take as they are (a value to convert, a default to fill)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import JSON, BigInteger, Boolean, Column, Enum, MetaData, String, Table, text

from paycore.db.engine import Database
from paycore.db.sql import insert_or_ignore

_metadata = MetaData()
plain = Table(
    "ioi_plain",
    _metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("key", String(64), primary_key=True),
    Column("flag", Boolean, nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
)
with_json = Table("ioi_json", _metadata, Column("id", String(64), primary_key=True), Column("body", JSON))
with_enum = Table(
    "ioi_enum",
    _metadata,
    Column("id", String(64), primary_key=True),
    Column("state", Enum("open", "closed", name="ioi_state")),
)
with_default = Table(
    "ioi_default",
    _metadata,
    Column("id", String(64), primary_key=True),
    Column("amount_minor", BigInteger, default=0),
)


@pytest.fixture
def tables(database: Database) -> Iterator[Database]:
    _metadata.create_all(database.engine)
    yield database


def test_inserts_once_and_reports_the_conflict(tables: Database) -> None:
    row = {"tenant_id": "t1", "key": "k1", "flag": True, "amount_minor": 2**53}

    first = tables.transaction(lambda c: insert_or_ignore(c, plain, row, ("tenant_id", "key")))
    again = tables.transaction(lambda c: insert_or_ignore(c, plain, {**row, "amount_minor": 1}, ("tenant_id", "key")))

    assert (first, again) == (True, False)
    with tables.read() as connection:
        stored = connection.execute(text('SELECT "key", flag, amount_minor FROM ioi_plain')).all()
    assert [(key, bool(flag), amount) for key, flag, amount in stored] == [("k1", True, 2**53)]


def test_refuses_a_column_the_driver_would_not_convert(tables: Database) -> None:
    with pytest.raises(TypeError, match=r"ioi_json\.body"):
        tables.transaction(lambda c: insert_or_ignore(c, with_json, {"id": "a", "body": {"x": 1}}, ("id",)))


def test_refuses_a_string_subtype_that_converts_its_values(tables: Database) -> None:
    with pytest.raises(TypeError, match=r"ioi_enum\.state"):
        tables.transaction(lambda c: insert_or_ignore(c, with_enum, {"id": "a", "state": "open"}, ("id",)))


def test_refuses_to_leave_a_python_side_default_unfilled(tables: Database) -> None:
    with pytest.raises(TypeError, match=r"ioi_default\.amount_minor"):
        tables.transaction(lambda c: insert_or_ignore(c, with_default, {"id": "a"}, ("id",)))
    assert tables.transaction(lambda c: insert_or_ignore(c, with_default, {"id": "a", "amount_minor": 5}, ("id",)))
