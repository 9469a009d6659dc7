"""SPEC §11: `paycore report losses` in its three formats, on SQLite and PostgreSQL: the same
rows as the API, integers in CSV and JSON, integer-formatted amounts in the table, pages
streamed in one snapshot, every tenant without --tenant."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from paycore.cli.main import app
from paycore.config import Settings
from tests.integration.reports import expected
from tests.integration.reports.expected import with_ids


def run(settings: Settings, *arguments: str) -> Result:
    env = {"PAYCORE_DATABASE_URL": settings.database_url, "COLUMNS": "250"}
    return CliRunner().invoke(app, ["report", "losses", *arguments], env=env, catch_exceptions=False)


def as_text(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{key: str(value) for key, value in row.items()} for row in rows]


def test_csv_has_integer_amounts(settings: Settings, ids: dict[str, str]) -> None:
    result = run(settings, "--tenant", "acme", "--format", "csv")
    assert result.exit_code == 0, result.output
    found = list(csv.DictReader(io.StringIO(result.stdout)))
    assert found == as_text(with_ids(expected.ALL_TIME, ids))
    assert "6 payouts; loss EUR 12.40, USD 53.00" in result.stderr


def test_json_of_every_tenant_streamed_in_pages(settings: Settings, ids: dict[str, str]) -> None:
    result = run(settings, "--format", "json", "--page-rows", "2")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    for row in body["data"]:
        assert row.pop("object") == "payout_loss"
    assert body == {
        "object": "list",
        "from": None,
        "to": None,
        "tenant_id": None,
        "totals": [
            {"currency": "EUR", "loss_minor": 1_240, "payouts": 2},
            {"currency": "USD", "loss_minor": 6_325, "payouts": 5},
        ],
        "dispute_totals": [],  # the fixture has no dispute (tests/integration/reports/test_dispute_losses.py)
        "has_more": False,
        "data": with_ids(expected.EVERY_TENANT, ids),
    }


def test_json_to_a_file_for_a_range(settings: Settings, ids: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "february.json"
    arguments = ["--tenant", "acme", "--from", "2026-02-01", "--to", "2026-02-28", "--format", "json"]
    result = run(settings, *arguments, "--output", str(target))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    body = json.loads(target.read_text())
    assert [{k: v for k, v in row.items() if k != "object"} for row in body["data"]] == with_ids(expected.FEBRUARY, ids)
    assert body["totals"] == expected.FEBRUARY_TOTALS
    assert (body["from"], body["to"], body["tenant_id"]) == ("2026-02-01", "2026-02-28", "acme")


def test_the_table_formats_minor_units(settings: Settings, ids: dict[str, str]) -> None:
    result = run(settings, "--tenant", "acme", "--from", "2026-01-01", "--to", "2026-01-31", "--page-rows", "3")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Payout losses, 2026-01-01 to 2026-01-31 (UTC), highest first"
    assert lines[1].split() == [
        "payout_id", "tenant_id", "rail", "currency", "amount", "status", "fees", "return_fees", "chargebacks",
        "return_shortfall", "fee_reversals", "chargeback_reversals", "recoveries", "refunds", "loss",
    ]  # fmt: skip
    charged_back = lines[2].split()
    assert charged_back[:6] == [ids["charged_back"], "acme", "ach", "USD", "200.00", "settled"]
    assert charged_back[6:] == ["0.25", "0.00", "200.00", "0.00", "0.00", "0.00", "0.00", "0.00", "200.25"]
    assert [line.split()[0] for line in lines[2:9]] == [ids[row["name"]] for row in expected.JANUARY]
    assert lines[9:] == [
        "7 payouts; loss EUR 16.40, USD 203.25",
        "  EUR: 16.40 over 2 payouts",
        "  USD: 203.25 over 5 payouts",
        "disputes on payments: no loss",
    ]


def test_the_table_shows_negative_rows(settings: Settings, ids: dict[str, str]) -> None:
    result = run(settings, "--tenant", "acme", "--from", "2026-02-01", "--to", "2026-02-28")
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[2:4]]
    assert [(row[0], row[-1]) for row in rows] == [(ids["fee_reversed"], "-0.25"), (ids["charged_back"], "-150.00")]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--from", "2026-02-30"], "from must be a date"),
        (["--from", "2026-03-01", "--to", "2026-02-01"], "after to"),
        (["--tenant", "not a tenant"], "tenant id"),
        (["--rail", "swift"], "rail must be one of"),
        (["--currency", "XYZ"], "currency"),
    ],
)
def test_bad_options_exit_2_and_say_why(settings: Settings, arguments: list[str], message: str) -> None:
    result = run(settings, *arguments)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_an_unknown_format_is_refused(settings: Settings) -> None:
    assert run(settings, "--format", "xml").exit_code == 2
