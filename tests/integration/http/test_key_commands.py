"""`paycore tenants keys | revoke-key | rotate-key`, run as a user would (a process of its own),
against a server in this process that has the key cached: it is refused within the servers'
key cache period, the revocation is in the audit log, and no key is ever printed but a new one."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient
from sqlalchemy import select

from paycore.audit.models import events
from paycore.db.engine import Database
from paycore.tenants import service as tenants
from tests.integration.http.test_auth import assert_error, bearer, create_account, create_tenant, run_cli

POLL_S = 0.2


def _listed(database_url: str, tenant: str) -> list[list[str]]:
    result = run_cli(database_url, "tenants", "keys", tenant)
    assert result.returncode == 0, result.stdout + result.stderr
    return [line.split() for line in result.stdout.splitlines() if line.startswith("key_")]


def _refused_within_the_period(client: TestClient, path: str, key: str) -> float:
    """Seconds until the server refuses `key` (401), failing past the cache period and a margin."""
    started = time.monotonic()
    deadline = started + tenants.KEY_CACHE_PERIOD_S + 2
    while time.monotonic() < deadline:
        response = client.get(path, headers=bearer(key))
        if response.status_code == 401:
            return time.monotonic() - started
        assert response.status_code == 200, response.text
        time.sleep(POLL_S)
    raise AssertionError(f"a revoked key was still served {tenants.KEY_CACHE_PERIOD_S + 2} s after its revocation")


def test_keys_lists_without_the_key_and_revoke_key_stops_a_running_server(
    client: TestClient, database: Database, database_url: str
) -> None:
    key = create_tenant(database, "acme")
    account = create_account(client, "cash", bearer(key))
    path = f"/v1/accounts/{account}"
    assert client.get(path, headers=bearer(key)).status_code == 200  # cached by the server now

    listed = _listed(database_url, "acme")
    assert len(listed) == 1 and listed[0][-1] == "live", listed
    key_id = listed[0][0]
    assert listed[0][1] == key[:12] + "...", "its first characters, to tell keys apart"
    assert key not in " ".join(listed[0])

    revoked = run_cli(database_url, "tenants", "revoke-key", "acme", key_id)
    assert revoked.returncode == 0, revoked.stdout + revoked.stderr
    assert key not in revoked.stdout + revoked.stderr
    _refused_within_the_period(client, path, key)
    assert_error(client.get(path, headers=bearer(key)), 401, "unauthorized")
    assert _listed(database_url, "acme")[0][-2] == "revoked"

    again = run_cli(database_url, "tenants", "revoke-key", "acme", key_id)
    output = " ".join((again.stdout + again.stderr).split())  # the console wraps long lines
    assert again.returncode == 1 and "nothing was revoked" in output
    with database.read() as connection:
        notes = connection.execute(
            select(events.c.type, events.c.actor, events.c.cause).where(events.c.object_id == key_id)
        ).all()
    assert [tuple(note) for note in notes] == [("api_key.revoked", "local", "key_revoked")], "recorded once"


def test_rotate_key_prints_a_working_key_once_and_retires_the_old(
    client: TestClient, database: Database, database_url: str
) -> None:
    old = create_tenant(database, "acme")
    account = create_account(client, "cash", bearer(old))
    path = f"/v1/accounts/{account}"
    assert client.get(path, headers=bearer(old)).status_code == 200
    old_id = _listed(database_url, "acme")[0][0]

    rotated = run_cli(database_url, "tenants", "rotate-key", "acme", old_id)
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    printed = [line.strip() for line in rotated.stdout.splitlines() if line.strip().startswith(tenants.KEY_PREFIX)]
    assert len(printed) == 1 and old not in rotated.stdout
    assert client.get(path, headers=bearer(printed[0])).status_code == 200
    _refused_within_the_period(client, path, old)

    listed = _listed(database_url, "acme")
    assert [line[-1] for line in listed].count("live") == 1 and len(listed) == 2
    assert run_cli(database_url, "tenants", "rotate-key", "acme", old_id).returncode == 1, "a revoked key"
    with database.read() as connection:
        cause = connection.execute(select(events.c.cause).where(events.c.object_id == old_id)).scalar_one()
    assert cause == "key_rotated"


def test_key_commands_refuse_an_unknown_tenant_or_key(database: Database, database_url: str) -> None:
    create_tenant(database, "acme")
    for args in (("keys", "nobody"), ("revoke-key", "acme", "key_nope"), ("rotate-key", "nobody", "key_nope")):
        result = run_cli(database_url, "tenants", *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
