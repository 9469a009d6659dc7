"""SPEC §3.2: tenants, local mode and API keys, on both databases (and the CLI that makes keys)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx2 import Response
from sqlalchemy import select

from paycore.db.engine import Database
from paycore.kit.clock import now_us
from paycore.tenants import service as tenants
from paycore.tenants.errors import InvalidTenantId, TenantExists
from paycore.tenants.models import api_keys

PAYCORE = Path(sys.executable).with_name("paycore")
CLI_TIMEOUT_S = 60


def create_tenant(database: Database, name: str) -> str:
    return database.transaction(lambda connection: tenants.create_tenant(connection, name, now_us=now_us())).api_key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def create_account(client: TestClient, code: str, headers: dict[str, str] | None = None, **extra: Any) -> str:
    body = {"code": code, "currency": "USD", "normal_balance": "credit", **extra}
    response = client.post("/v1/accounts", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def transfer(client: TestClient, debit: str, credit: str, headers: dict[str, str], **extra: Any) -> Response:
    body = {"debit_account_id": debit, "credit_account_id": credit, "amount_minor": 10, "currency": "USD", **extra}
    return client.post("/v1/transfers", json=body, headers={**headers, "Idempotency-Key": os.urandom(8).hex()})


def assert_error(response: Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code, response.text


def objects_of(client: TestClient, headers: dict[str, str]) -> dict[str, str]:
    """A source and sink account, a posted transfer and an open hold, made by `headers`' tenant."""
    source = create_account(client, "source", headers, normal_balance="debit")
    sink = create_account(client, "sink", headers)
    posted = transfer(client, source, sink, headers)
    hold = transfer(client, source, sink, headers, pending=True)
    assert posted.status_code == 201 and hold.status_code == 201
    return {"source": source, "sink": sink, "transfer": posted.json()["id"], "hold": hold.json()["id"]}


def assert_unreachable(client: TestClient, objects: dict[str, str], headers: dict[str, str]) -> None:
    """Every way of touching another tenant's objects is a 404, as if they did not exist."""
    for path in (
        f"/v1/accounts/{objects['sink']}",
        f"/v1/accounts/{objects['sink']}/balance",
        f"/v1/accounts/{objects['sink']}/entries",
    ):
        assert_error(client.get(path, headers=headers), 404, "account_not_found")
    for transfer_id in (objects["transfer"], objects["hold"]):
        assert_error(client.get(f"/v1/transfers/{transfer_id}", headers=headers), 404, "transfer_not_found")
    for action, transfer_id in (("post", "hold"), ("void", "hold"), ("reverse", "transfer")):
        response = client.post(
            f"/v1/transfers/{objects[transfer_id]}/{action}", headers={**headers, "Idempotency-Key": f"x-{action}"}
        )
        assert_error(response, 404, "transfer_not_found")
    assert_error(transfer(client, objects["source"], objects["sink"], headers), 404, "account_not_found")
    own = create_account(client, f"own-{os.urandom(4).hex()}", headers)
    assert_error(transfer(client, objects["source"], own, headers), 404, "account_not_found")
    assert_error(transfer(client, own, objects["sink"], headers), 404, "account_not_found")


# ---------------------------------------------------------------------------- local mode


def test_local_mode_acts_as_default_or_the_named_tenant(client: TestClient) -> None:
    account_id = create_account(client, "shared-code")
    assert client.get(f"/v1/accounts/{account_id}", headers={"Paycore-Tenant": "default"}).status_code == 200
    # The same code is free in another tenant.
    other = create_account(client, "shared-code", {"Paycore-Tenant": "acme"})
    assert other != account_id
    assert client.get(f"/v1/accounts/{other}", headers={"Paycore-Tenant": "acme"}).status_code == 200
    assert_error(client.get(f"/v1/accounts/{other}"), 404, "account_not_found")


def test_local_mode_isolates_tenants(client: TestClient) -> None:
    objects = objects_of(client, {"Paycore-Tenant": "acme"})
    assert_unreachable(client, objects, {"Paycore-Tenant": "globex"})
    assert_unreachable(client, objects, {})  # `default` is a tenant like any other
    # And nothing the other tenant tried moved acme's money.
    balance = client.get(f"/v1/accounts/{objects['sink']}/balance", headers={"Paycore-Tenant": "acme"}).json()
    assert (balance["posted_minor"], balance["pending_minor"]) == (10, 10)


@pytest.mark.parametrize("tenant", ["", "bad tenant", "a/b", "x" * 65, "caf\u00e9", "semi;colon"])
def test_invalid_tenant_header_is_400(client: TestClient, tenant: str) -> None:
    response = client.get("/v1/accounts/acct_x", headers={b"Paycore-Tenant": tenant.encode("latin-1")})
    assert_error(response, 400, "invalid_tenant_id")


@pytest.mark.parametrize("tenant", ["A-Z_a.z-09", "x" * 64])
def test_valid_tenant_ids_at_the_edges(client: TestClient, tenant: str) -> None:
    create_account(client, "c", {"Paycore-Tenant": tenant})
    assert client.get(f"/v1/tenants/{tenant}/balance").status_code == 200


@pytest.mark.parametrize("tenant", ["bad!id", "x" * 65, "%20"])
def test_invalid_tenant_in_the_path_is_400(client: TestClient, tenant: str) -> None:
    assert_error(client.get(f"/v1/tenants/{tenant}/balance"), 400, "invalid_tenant_id")


# ---------------------------------------------------------------------------- API keys


def test_once_a_key_exists_every_request_needs_one(client: TestClient, database: Database) -> None:
    assert client.get("/v1/accounts/acct_x").status_code == 404  # local mode until the first key
    create_tenant(database, "acme")
    body = {"code": "c", "currency": "USD", "normal_balance": "credit"}
    for headers in (
        {},
        {"Authorization": "Bearer pck_wrong"},
        {"Authorization": "Basic YWxhZGRpbjpvcGVu"},
        {"Authorization": "Bearer "},
        {"Paycore-Tenant": "acme"},
    ):
        for response in (
            client.get("/v1/accounts/acct_x", headers=headers),
            client.post("/v1/accounts", json=body, headers=headers),
            client.post("/v1/transfers", json={}, headers={**headers, "Idempotency-Key": "k"}),
            client.get("/v1/tenants/acme/balance", headers=headers),
        ):
            assert_error(response, 401, "unauthorized")
            assert response.headers["WWW-Authenticate"] == "Bearer"


def test_authentication_comes_before_validation(client: TestClient, database: Database) -> None:
    """An unauthenticated caller learns nothing, not even what a valid body looks like."""
    create_tenant(database, "acme")
    assert_error(client.post("/v1/transfers", json={"amount_minor": 1.0}), 401, "unauthorized")
    assert_error(client.post("/v1/accounts", json={"code": 7}), 401, "unauthorized")
    assert_error(client.get("/v1/accounts/acct_x/entries", params={"limit": 1000}), 401, "unauthorized")
    assert_error(client.get("/v1/tenants/bad!id/balance"), 401, "unauthorized")


def test_a_key_reaches_only_its_own_tenant(client: TestClient, database: Database) -> None:
    acme = bearer(create_tenant(database, "acme"))
    globex = bearer(create_tenant(database, "globex"))
    objects = objects_of(client, acme)
    assert client.get(f"/v1/accounts/{objects['sink']}", headers=acme).status_code == 200
    assert_unreachable(client, objects, globex)
    # A tenant header does not change who a key is.
    assert_unreachable(client, objects, {**globex, "Paycore-Tenant": "acme"})


def test_another_tenants_path_is_403(client: TestClient, database: Database) -> None:
    acme = bearer(create_tenant(database, "acme"))
    create_tenant(database, "globex")
    assert client.get("/v1/tenants/acme/balance", headers=acme).status_code == 200
    assert_error(client.get("/v1/tenants/globex/balance", headers=acme), 403, "forbidden")
    credit = {"idempotency_key": "k", "lines": [{"desc": "x", "amount_minor": 1, "currency": "USD"}]}
    assert_error(client.post("/v1/tenants/globex/credits", json=credit, headers=acme), 403, "forbidden")
    assert client.post("/v1/tenants/acme/credits", json=credit, headers=acme).status_code == 201
    # A tenant that does not exist is someone else's path too.
    assert_error(client.get("/v1/tenants/nobody/balance", headers=acme), 403, "forbidden")


def test_keys_are_stored_hashed(database: Database) -> None:
    key = create_tenant(database, "acme")
    assert key.startswith("pck_") and len(key) > 40
    with database.read() as connection:
        rows = list(connection.execute(select(api_keys)))
    assert len(rows) == 1
    assert rows[0].key_hash == tenants.hash_key(key)
    assert all(key not in str(value) for value in rows[0])


def test_create_tenant_refuses_bad_and_duplicate_names(database: Database) -> None:
    create_tenant(database, "acme")
    with pytest.raises(TenantExists):
        create_tenant(database, "acme")
    with pytest.raises(InvalidTenantId):
        create_tenant(database, "not a tenant id")


# ---------------------------------------------------------------------------- the CLI


def run_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PAYCORE_DATABASE_URL": database_url}
    return subprocess.run(
        [str(PAYCORE), *args], env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False
    )


def test_cli_tenants_create_prints_a_key_once(client: TestClient, database: Database, database_url: str) -> None:
    result = run_cli(database_url, "tenants", "create", "acme")
    assert result.returncode == 0, result.stderr
    keys = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("pck_")]
    assert len(keys) == 1, result.stdout
    key = keys[0]
    assert client.get("/v1/tenants/acme/balance", headers=bearer(key)).status_code == 200
    assert_error(client.get("/v1/tenants/acme/balance"), 401, "unauthorized")

    again = run_cli(database_url, "tenants", "create", "acme")
    assert again.returncode != 0
    assert "pck_" not in again.stdout + again.stderr
    assert "already exists" in again.stdout + again.stderr
    with database.read() as connection:
        assert len(list(connection.execute(select(api_keys.c.id)))) == 1


def test_cli_serve_refuses_a_public_address_in_local_mode(database_url: str) -> None:
    result = run_cli(database_url, "serve", "--host", "0.0.0.0", "--port", "0")
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())  # the console wraps long lines
    assert "refusing to bind 0.0.0.0" in output
    assert "paycore tenants create" in output


def _key_id(database: Database, api_key: str) -> str:
    with database.read() as connection:
        owner = tenants.owner_of_key(connection, api_key)
    assert owner is not None
    return owner.key_id


def test_a_key_revoked_in_this_process_is_refused_at_once(client: TestClient, database: Database) -> None:
    key = create_tenant(database, "acme")
    account = create_account(client, "cash", bearer(key))
    assert client.get(f"/v1/accounts/{account}", headers=bearer(key)).status_code == 200  # cached now
    auth = client.app.state.auth  # type: ignore[attr-defined]
    assert auth.revoke_key("acme", _key_id(database, key)) is True
    # Within the cache's 5 s: refused because this process dropped it, not because it expired.
    assert_error(client.get(f"/v1/accounts/{account}", headers=bearer(key)), 401, "unauthorized")
    assert_error(transfer(client, account, account, bearer(key)), 401, "unauthorized")  # the thin edge too
    assert auth.revoke_key("acme", _key_id_of_revoked(database, "acme")) is False, "revoked once"
    assert auth.revoke_key("other", "key_nope") is False


def _key_id_of_revoked(database: Database, tenant_id: str) -> str:
    query = select(api_keys.c.id).where(api_keys.c.tenant_id == tenant_id, api_keys.c.revoked_at_us.is_not(None))
    with database.read() as connection:
        return str(connection.execute(query).scalar_one())


def test_a_key_rotated_in_this_process_is_refused_at_once(client: TestClient, database: Database) -> None:
    old = create_tenant(database, "acme")
    account = create_account(client, "cash", bearer(old))
    assert client.get(f"/v1/accounts/{account}", headers=bearer(old)).status_code == 200  # cached now
    auth = client.app.state.auth  # type: ignore[attr-defined]
    new = auth.rotate_key("acme", _key_id(database, old))
    assert new is not None and new != old
    assert_error(client.get(f"/v1/accounts/{account}", headers=bearer(old)), 401, "unauthorized")
    assert client.get(f"/v1/accounts/{account}", headers=bearer(new)).status_code == 200
    assert auth.rotate_key("acme", _key_id_of_revoked(database, "acme")) is None, "a revoked key is not rotated"
    with database.read() as connection:
        live = connection.execute(select(api_keys.c.id).where(api_keys.c.revoked_at_us.is_(None))).all()
    assert len(live) == 1


def test_a_read_that_began_before_a_revocation_is_not_cached(
    client: TestClient, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = create_tenant(database, "acme")
    key_id = _key_id(database, key)
    auth = client.app.state.auth  # type: ignore[attr-defined]
    read = tenants.owner_of_key

    def read_then_revoked(connection: Any, api_key: str) -> Any:
        owner = read(connection, api_key)  # the key as it was before the revocation committed
        auth.revoke_key("acme", key_id)
        return owner

    monkeypatch.setattr(tenants, "owner_of_key", read_then_revoked)
    assert auth.owner_of_key(key) is not None  # this request raced the revocation and won
    monkeypatch.setattr(tenants, "owner_of_key", read)
    assert auth.owner_of_key(key) is None, "not answered from a cache filled by the raced read"
