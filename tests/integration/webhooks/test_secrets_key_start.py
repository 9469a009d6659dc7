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
from paycore.keyring import load as load_keyring
from tests.e2e.support import ServerProcess, call, start_all
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


# ---------------------------------------------------------------------------- serve --dev


def dev_env(url: str, tmp_path: Path) -> dict[str, str]:
    """`serve --dev` as `./scripts/dev` runs it: no PAYCORE_SECRETS_KEY."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PAYCORE_")}
    env.update(PAYCORE_DATABASE_URL=url, PAYCORE_SANDBOX_DATABASE_URL=f"sqlite:///{tmp_path}/data/s.db")
    return env


def dev_server(url: str, tmp_path: Path) -> ServerProcess:
    """`paycore serve --dev --host 127.0.0.1`, started; the caller stops it."""
    server = ServerProcess(dev_env(url, tmp_path), tmp_path / "serve.log", args=("--dev",))
    start_all([server], attempts=1)
    return server


def log_events(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_serve_dev_keeps_its_local_key_file_once_an_api_key_exists(tmp_path: Path) -> None:
    """The first start (local mode) makes the key file and seals an endpoint's secret with it; once
    `paycore tenants create` made a key, `serve --dev` on loopback starts again with that file, warns
    how to move to PAYCORE_SECRETS_KEY, and still opens what local mode sealed (a replay shows it)."""
    (tmp_path / "data").mkdir()
    url = f"sqlite:///{tmp_path}/data/p.db"
    endpoint = {"url": "http://127.0.0.1:9/hook", "events": ["*"]}  # loopback: allowed in local mode
    server = dev_server(url, tmp_path)
    try:
        made = call(server.port, "POST", "/v1/webhook_endpoints", endpoint, headers={"Idempotency-Key": "ep-1"})
        assert made.status == 201, made
    finally:
        server.stop()
    key_file = tmp_path / "data" / KEY_FILE
    file_key = key_file.read_text().strip()
    created = run(url, "tenants", "create", "default", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    api_key = created.stdout.strip().splitlines()[-1].split()[-1]

    server = dev_server(url, tmp_path)  # refused (exit status 2) before: no PAYCORE_SECRETS_KEY
    try:
        auth = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": "ep-1"}
        replayed = call(server.port, "POST", "/v1/webhook_endpoints", endpoint, headers=auth)
        assert replayed.status == 201 and replayed.headers.get("idempotent-replayed") == "true", replayed
        assert replayed.body["secret"] == made.body["secret"]  # opened with the local key file
    finally:
        server.stop()
    log = (tmp_path / "serve.log").read_text()
    [warning] = [line for line in log_events(log) if line.get("event") == "secrets_key_dev_file"]
    assert warning["level"] == "warning" and warning["path"] == str(key_file)
    assert "PAYCORE_SECRETS_KEY" in str(warning["message"]) and "paycore secrets rotate" in str(warning["message"])
    assert file_key not in log and made.body["secret"] not in log
    assert key_file.read_text().strip() == file_key  # the same file, never replaced


def test_serve_dev_keeps_its_local_key_file_once_an_operator_exists(tmp_path: Path) -> None:
    """The first operator ends local mode too (SPEC §3.2 and the console's people): `./scripts/dev`
    still starts, on the key file of its first start, with the warning."""
    (tmp_path / "data").mkdir()
    url = f"sqlite:///{tmp_path}/data/p.db"
    dev_server(url, tmp_path).stop()  # local mode: makes the key file
    created = run(url, "operators", "create", "alice", "--role", "approver", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    server = dev_server(url, tmp_path)
    try:
        assert call(server.port, "GET", "/v1/accounts/acct_X").status == 401  # not local mode any more
    finally:
        server.stop()
    events = [line.get("event") for line in log_events((tmp_path / "serve.log").read_text())]
    assert events.count("secrets_key_dev_file") == 1 and "start_refused" not in events


def test_outside_dev_on_loopback_the_local_key_file_is_refused(tmp_path: Path) -> None:
    """With the key file local mode made and an API key, the production entry points still refuse
    without PAYCORE_SECRETS_KEY, naming the file; so does `serve --dev` off loopback (with a real
    webhook secret, which that bind needs); and `serve --dev` never makes a key file outside local
    mode."""
    url = migrated(tmp_path, with_key=False)
    settings = Settings(database_url=url)
    load_keyring(settings, local_mode=lambda: True)  # what the first start in local mode leaves
    key_file = tmp_path / "data" / KEY_FILE
    database = Database(settings)
    add_key(database)
    database.dispose()
    for command in (
        ["serve", "--port", "0"],
        ["worker", "--once"],
        ["serve", "--dev", "--host", "0.0.0.0", "--port", "0"],
    ):
        result = run(url, *command, cwd=tmp_path, PAYCORE_PROCESSOR_WEBHOOK_SECRET="whsec_a_real_one")
        assert result.returncode == 2, (command, result.stderr)
        [refused] = refusals(result)
        assert refused["reason"] == "secrets_key_missing", command
        assert str(key_file) in str(refused["message"]), command

    key_file.unlink()
    result = run(url, "serve", "--dev", "--port", "0", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert [refused["reason"] for refused in refusals(result)] == ["secrets_key_missing"]
    assert not key_file.exists() and not (tmp_path / KEY_FILE).exists()
