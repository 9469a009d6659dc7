"""insert_or_ignore runs on the driver: it inserts once, reports a conflict as False, names a
partial unique index by its predicate, and refuses columns the driver could not take as they
are (a value to convert, a default to fill)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import JSON, BigInteger, Boolean, Column, Enum, Index, MetaData, String, Table, text

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

# "Unique where present", as the ledger's pending_id, reverses_id and idempotency_key.
with_partial = Table(
    "ioi_partial",
    _metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("ref", String(64), nullable=True),
    Index(
        "uq_ioi_partial_tenant_id_ref",
        "tenant_id",
        "ref",
        unique=True,
        sqlite_where=text("ref IS NOT NULL"),
        postgresql_where=text("ref IS NOT NULL"),
    ),
)
with_mismatched_partial = Table(
    "ioi_mismatched",
    _metadata,
    Column("id", String(64), primary_key=True),
    Column("ref", String(64), nullable=True),
    Index("uq_ioi_mismatched_ref", "ref", unique=True, postgresql_where=text("ref IS NOT NULL")),
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


def test_a_partial_unique_index_is_the_arbiter_with_its_predicate(tables: Database) -> None:
    def insert(row_id: str, ref: str | None) -> bool:
        row = {"id": row_id, "tenant_id": "t1", "ref": ref}
        return tables.transaction(lambda c: insert_or_ignore(c, with_partial, row, ("tenant_id", "ref")))

    # Without the predicate in ON CONFLICT both databases refuse the statement outright.
    assert [insert("a", "r1"), insert("b", "r1"), insert("c", None), insert("d", None)] == [True, False, True, True]
    with tables.read() as connection:
        stored = connection.execute(text("SELECT id FROM ioi_partial ORDER BY id")).scalars().all()
    assert stored == ["a", "c", "d"]


def test_refuses_a_partial_index_whose_predicate_differs_by_database(tables: Database) -> None:
    with pytest.raises(TypeError, match="uq_ioi_mismatched_ref"):
        tables.transaction(lambda c: insert_or_ignore(c, with_mismatched_partial, {"id": "a", "ref": "r"}, ("ref",)))
