"""Issue 29, finding 8: webhook signing secrets are encrypted at rest (ADR 0018). A dump of the
database alone (the endpoints and the stored idempotent answers) holds no secret, while
deliveries still verify with the secret shown at creation and a replay still shows it."""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import replace
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Connection, select, update
from typer.testing import CliRunner, Result

from paycore.cli.main import app as cli
from paycore.db.engine import Database
from paycore.http.app import create_app
from paycore.idempotency.models import idempotency_keys
from paycore.keyring import PREFIX, Keyring, key_id
from paycore.webhooks import rounds
from paycore.webhooks.models import webhook_endpoints
from paycore.webhooks.verify import verify_event
from tests.integration.webhooks.support import Env


def dump(database: Database) -> str:
    """Every value of the two tables that held secrets in clear, as a dump would show them."""
    with database.read() as connection:
        rows = [
            *connection.execute(select(webhook_endpoints)),
            *connection.execute(select(idempotency_keys)),
        ]
    return "\n".join(repr(tuple(row)) for row in rows)


def create(env: Env, key: str, url: str | None = None) -> Any:
    return env.client.post(
        "/v1/webhook_endpoints",
        json={"url": url or env.receiver.url, "events": ["*"]},
        headers={"Idempotency-Key": key},
    )


def test_a_dump_holds_no_secret_and_deliveries_verify_with_the_one_shown(env: Env) -> None:
    made = create(env, "create-1").json()
    rotated = env.client.post(f"/v1/webhook_endpoints/{made['id']}/rotate_secret", headers={"Idempotency-Key": "r-1"})
    assert rotated.status_code == 200, rotated.text
    shown = (made["secret"], rotated.json()["secret"])
    assert all(secret.startswith("whsec_") for secret in shown)

    text = dump(env.database)
    assert made["id"] in text  # the rows are there
    assert "whsec_" not in text
    assert not any(secret.removeprefix("whsec_") in text for secret in shown)

    env.payout()
    env.deliver()
    [got] = env.receiver.delivered()
    for secret in shown:  # the rotation's overlap: both sign
        assert verify_event(got.body, got.headers["paycore-signature"], secret)["type"] == "payout.scheduled"


def test_a_replay_of_the_create_request_shows_the_secret_again(env: Env) -> None:
    first = create(env, "create-2")
    again = create(env, "create-2")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert again.json()["secret"].startswith("whsec_")


# --- key rotation: a new key first and the old one after it, then `paycore secrets rotate` -----

NEW = bytes(range(32, 64))


def written_in_clear(env: Env, endpoint_id: str, idempotency_key: str, secret: str) -> None:
    """An endpoint and its stored answer as paycore wrote them before ADR 0018: in clear."""

    def write(connection: Connection) -> None:
        connection.execute(update(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id).values(secret=secret))
        answer = connection.execute(
            select(idempotency_keys.c.response_body).where(idempotency_keys.c.key == idempotency_key)
        ).scalar_one()
        shown = {**json.loads(answer), "secret": secret}
        connection.execute(
            update(idempotency_keys)
            .where(idempotency_keys.c.key == idempotency_key)
            .values(response_body=json.dumps(shown, separators=(",", ":")))
        )

    env.database.transaction(write)


def replayed_secret(env: Env, keys: tuple[bytes, ...], idempotency_key: str) -> str:
    settings = replace(env.settings, secrets_keys=keys)
    with TestClient(create_app(settings, env.database)) as client:
        response = client.post(
            "/v1/webhook_endpoints",
            json={"url": env.receiver.url, "events": ["*"]},
            headers={"Idempotency-Key": idempotency_key},
        )
    assert response.headers["idempotent-replayed"] == "true", response.text
    return str(response.json()["secret"])


def delivered_and_verified(env: Env, keys: tuple[bytes, ...], secrets: dict[str, str]) -> None:
    """One event to every endpoint, signed with the secret opened by these keys."""
    env.receiver.received.clear()
    env.payout()
    config = replace(env.config, keyring=Keyring(keys))
    assert rounds.deliver_due(env.database, config, "test-worker", endpoints_max=10) == len(secrets)
    [event] = env.events(type="payout.scheduled")[-1:]
    endpoint_of = {delivery["id"]: delivery["endpoint_id"] for delivery in env.deliveries(event["id"])}
    got = {endpoint_of[request.headers["paycore-delivery-id"]]: request for request in env.receiver.delivered()}
    assert set(got) == set(secrets)
    for endpoint_id, request in got.items():
        verify_event(request.body, request.headers["paycore-signature"], secrets[endpoint_id])


def rotate(env: Env, keys: tuple[bytes, ...]) -> Result:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level  # the CLI logs to its (captured) stderr
    variables = {
        "PAYCORE_DATABASE_URL": env.settings.database_url,
        "PAYCORE_SECRETS_KEY": ",".join(base64.urlsafe_b64encode(key).decode() for key in keys),
        "COLUMNS": "200",
    }
    try:
        return CliRunner().invoke(cli, ["secrets", "rotate"], env=variables, catch_exceptions=False)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_a_new_key_first_still_opens_the_old_and_rotate_lets_the_old_key_go(env: Env) -> None:
    old = env.settings.secrets_keys
    made = create(env, "made").json()
    rotated = env.client.post(f"/v1/webhook_endpoints/{made['id']}/rotate_secret", headers={"Idempotency-Key": "r"})
    clear = create(env, "clear").json()
    written_in_clear(env, clear["id"], "clear", clear["secret"])
    secrets = {made["id"]: rotated.json()["secret"], clear["id"]: clear["secret"]}

    new_first = (NEW, *old)  # deployed first: new secrets sealed under NEW, the old ones still open
    assert replayed_secret(env, new_first, "made") == made["secret"]
    assert replayed_secret(env, new_first, "clear") == clear["secret"]
    delivered_and_verified(env, new_first, secrets)

    result = rotate(env, new_first)
    assert result.exit_code == 0, result.output
    assert "endpoints: 2 rows examined, 3 secrets re-encrypted (1 of them were in clear)" in result.output
    assert "secrets re-encrypted (1 of them were in clear)" in result.output.split("stored answers:")[1]
    assert f"every secret is sealed under key {key_id(NEW)}" in result.output
    text = dump(env.database)
    assert "whsec_" not in text and f"{PREFIX}.{key_id(old[0])}." not in text
    assert text.count(f"{PREFIX}.{key_id(NEW)}.") == 3 + 3  # the endpoints' 3, the 3 answers' (made, r, clear)

    again = rotate(env, new_first)  # idempotent: nothing left to do
    assert again.exit_code == 0 and "0 secrets re-encrypted" in again.output
    assert dump(env.database) == text

    only_new = (NEW,)  # the old key dropped
    assert replayed_secret(env, only_new, "made") == made["secret"]
    assert replayed_secret(env, only_new, "clear") == clear["secret"]
    delivered_and_verified(env, only_new, secrets)


def test_a_secret_under_a_key_no_longer_held_is_never_sent_and_rotate_says_so(env: Env) -> None:
    made = create(env, "made").json()
    env.payout()
    config = replace(env.config, keyring=Keyring([NEW]))  # the key it was sealed under dropped too soon
    assert rounds.deliver_due(env.database, config, "test-worker", endpoints_max=1) == 1
    assert env.receiver.received == []
    [event] = env.events()
    [delivery] = env.deliveries(event["id"])
    assert [attempt["error"] for attempt in delivery["attempts"]] == ["secret_unreadable"]
    assert delivery["status"] == "pending"  # retried once the key is back

    result = rotate(env, (NEW,))
    assert result.exit_code == 1, result.output
    assert "2 secrets are sealed under a key PAYCORE_SECRETS_KEY lacks" in result.output
    assert made["secret"] not in result.output

    # The tenant rotates its secret on an app with the keys there are: deliveries resume at once,
    # signed with the new secret only (the lost one cannot sign).
    with TestClient(create_app(replace(env.settings, secrets_keys=(NEW,)), env.database)) as client:
        rotated = client.post(f"/v1/webhook_endpoints/{made['id']}/rotate_secret", headers={"Idempotency-Key": "r"})
    assert rotated.status_code == 200, rotated.text
    time.sleep(0.005)  # past the endpoint's 1-2 ms backoff
    assert rounds.deliver_due(env.database, config, "test-worker", endpoints_max=1) == 1
    [got] = env.receiver.delivered()
    assert got.headers["paycore-signature"].count("v1=") == 1
    verify_event(got.body, got.headers["paycore-signature"], rotated.json()["secret"])
