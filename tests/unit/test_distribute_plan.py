"""`paycore db distribute`'s plan (ADR 0031): reference tables first, the colocation anchor,
then every distributed table after the tables its foreign keys point at; what is placed
already is skipped; a table that fits no list is refused."""

from __future__ import annotations

import pytest

from paycore.db.distribute import COLOCATION_ANCHOR, REFERENCE_TABLES, CannotDistribute, Catalogue, Step, plan


def catalogue(
    tables: tuple[str, ...],
    references: tuple[tuple[str, str], ...] = (),
    placed: dict[str, str] | None = None,
    without_tenant: frozenset[str] = frozenset({"alembic_version"}),
) -> Catalogue:
    return Catalogue(tables, without_tenant, references, dict(placed or {}))  # type: ignore[arg-type]


def test_reference_tables_then_the_anchor_then_tables_after_what_they_reference() -> None:
    tables = (
        "alembic_version",
        "api_keys",
        "ledger_entries",
        "ledger_transfers",
        COLOCATION_ANCHOR,
        "payments",
        "tenants",
    )
    references = (
        ("ledger_entries", "ledger_transfers"),
        ("ledger_entries", COLOCATION_ANCHOR),
        ("ledger_transfers", "ledger_transfers"),  # a self-reference does not wait for itself
    )
    steps = plan(catalogue(tables, references))
    assert steps == [
        Step("tenants", "reference"),
        Step("api_keys", "reference"),
        Step(COLOCATION_ANCHOR, "distributed"),
        Step("ledger_transfers", "distributed"),
        Step("payments", "distributed"),
        Step("ledger_entries", "distributed"),
    ]
    assert REFERENCE_TABLES.index("tenants") < REFERENCE_TABLES.index("api_keys")


def test_what_is_placed_already_is_not_planned_again() -> None:
    tables = ("tenants", COLOCATION_ANCHOR, "payments")
    placed = {"tenants": "reference", COLOCATION_ANCHOR: "distributed", "payments": "distributed"}
    assert plan(catalogue(tables, placed=placed)) == []
    assert plan(catalogue(tables, placed={"tenants": "reference"})) == [
        Step(COLOCATION_ANCHOR, "distributed"),
        Step("payments", "distributed"),
    ]


def test_a_table_without_tenant_id_that_is_no_reference_table_is_refused() -> None:
    with pytest.raises(CannotDistribute, match="audit_exports"):
        plan(catalogue(("audit_exports", "payments"), without_tenant=frozenset({"audit_exports"})))


def test_a_table_placed_the_other_way_is_refused() -> None:
    with pytest.raises(CannotDistribute, match="payments is already a reference table"):
        plan(catalogue(("payments",), placed={"payments": "reference"}))


def test_a_cycle_of_foreign_keys_is_refused() -> None:
    with pytest.raises(CannotDistribute, match="cycle"):
        plan(catalogue(("a", "b"), references=(("a", "b"), ("b", "a"))))
