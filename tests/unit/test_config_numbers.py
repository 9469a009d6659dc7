"""A number in an environment variable is written in ASCII digits (paycore.kit.numbers): `int()`
reads Arabic-Indic or fullwidth digits, spaces, a sign and underscores, so `PAYCORE_DB_POOL_SIZE`
written in another script's digits used to start a server sized by it."""

from __future__ import annotations

import pytest

from paycore.config import Settings


@pytest.mark.parametrize("written", ["\u0661\u0662", "\uff15", "²", " 5", "5 ", "+5", "5_0", "5.0", "-5", "9" * 40])
def test_a_number_not_written_in_ascii_digits_stops_the_start(monkeypatch: pytest.MonkeyPatch, written: str) -> None:
    monkeypatch.setenv("PAYCORE_DB_POOL_SIZE", written)
    with pytest.raises(
        SystemExit, match=r"PAYCORE_DB_POOL_SIZE must be (a whole number written in the digits 0-9|at most 19 digits)"
    ):
        Settings.from_env()


def test_a_number_in_ascii_digits_is_read_within_its_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYCORE_DB_POOL_SIZE", "12")
    assert Settings.from_env().db_pool_size == 12
    monkeypatch.setenv("PAYCORE_DB_POOL_SIZE", "0")
    with pytest.raises(SystemExit, match="PAYCORE_DB_POOL_SIZE must be at least 1, got '0'"):
        Settings.from_env()
