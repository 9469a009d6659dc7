"""Issue 29, finding 8, at start-up (ADR 0018): outside local mode `PAYCORE_SECRETS_KEY` is
required, and every entry point refuses to start without it (exit status 2, `start_refused`); in
local mode a key is generated into the data folder on first start and reused afterwards.
SQLite only: the rule does not depend on the database (the in-process tests run both)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from tests.support.exposure import add_key

PAYCORE = Path(sys.executable).with_name("paycore")
CLI_TIMEOUT_S = 60
KEY_FILE = "paycore.secrets.key"


def run(database_url: str, *args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env.update(PAYCORE_DATABASE_URL=database_url, PAYCORE_PROCESSOR_URL="http://127.0.0.1:9", **extra)
    return subprocess.run(
        [str(PAYCORE), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False
    )


def migrated(tmp_path: Path, *, with_key: bool) -> str:
    url = f"sqlite:///{tmp_path}/data/p.db"
    (tmp_path / "data").mkdir()
    database = Database(Settings(database_url=url))
    migrate.upgrade_new(database)  # a new file of this test's own
    if with_key:
        add_key(database)
    database.dispose()
    return url


def refusals(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "start_refused"]


@pytest.mark.parametrize("command", [["worker", "--once"], ["serve", "--port", "0"]], ids=["worker", "serve"])
def test_outside_local_mode_a_missing_key_refuses_to_start(command: list[str], tmp_path: Path) -> None:
    url = migrated(tmp_path, with_key=True)
    result = run(url, *command, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [refused] = refusals(result)
    assert refused["reason"] == "secrets_key_missing"
    assert "PAYCORE_SECRETS_KEY" in str(refused["message"])
    assert not (tmp_path / "data" / KEY_FILE).exists() and not (tmp_path / KEY_FILE).exists()


def test_make_server_refuses_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import app

    url = migrated(tmp_path, with_key=True)
    monkeypatch.setenv("PAYCORE_DATABASE_URL", url)
    monkeypatch.delenv("PAYCORE_SECRETS_KEY", raising=False)
    with pytest.raises(Exception, match="PAYCORE_SECRETS_KEY") as raised:
        app.make_server(host="127.0.0.1", port=0)
    assert type(raised.value).__name__ == "SecretsKeyRefused"


def test_in_local_mode_a_key_is_generated_next_to_the_database_once(tmp_path: Path) -> None:
    url = migrated(tmp_path, with_key=False)
    first = run(url, "worker", "--once", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    key_file = tmp_path / "data" / KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text()
    assert run(url, "worker", "--once", cwd=tmp_path).returncode == 0
    assert key_file.read_text() == key  # reused, never replaced
    assert key.strip() not in first.stderr  # never logged
