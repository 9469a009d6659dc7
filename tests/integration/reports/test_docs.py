"""docs/losses.md shows the report's SQL; this keeps the page and the code from drifting."""

from __future__ import annotations

from pathlib import Path

from paycore.reports import dispute_losses, losses

MARKER = "<!-- REPORT_SQL:"
DISPUTES_MARKER = "<!-- DISPUTE_TOTALS_SQL:"


def documented_sql(repo_root: Path, marker: str = MARKER) -> str:
    page = (repo_root / "docs" / "losses.md").read_text(encoding="utf-8")
    assert page.count(marker) == 1
    after = page.split(marker, 1)[1].split("\n", 1)[1]
    assert after.startswith("```sql\n"), "the SQL block follows its marker line"
    return after.removeprefix("```sql\n").split("\n```\n", 1)[0]


def test_the_documented_statement_is_the_one_the_code_runs(repo_root: Path) -> None:
    assert documented_sql(repo_root) == losses.REPORT_SQL


def test_the_documented_dispute_statement_is_the_one_the_code_runs(repo_root: Path) -> None:
    assert documented_sql(repo_root, DISPUTES_MARKER) == dispute_losses.DISPUTE_TOTALS_SQL


def test_the_all_tenant_form_differs_by_the_tenant_line_only() -> None:
    tenant_line = "\n        AND a.tenant_id = :tenant_id"
    assert losses.REPORT_SQL.count(tenant_line) == 1
    assert losses.REPORT_SQL.replace(tenant_line, "") == losses.REPORT_SQL_ALL_TENANTS


def test_the_statement_holds_no_fractional_arithmetic() -> None:
    """SPEC: money is integer minor units, in SQL too."""
    upper = (losses.REPORT_SQL + dispute_losses.DISPUTE_TOTALS_SQL).upper()
    for word in ("REAL", "FLOAT", "DOUBLE", "NUMERIC", "DECIMAL", "AVG(", "/"):
        assert word not in upper, word
