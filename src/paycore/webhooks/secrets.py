"""Webhook endpoints' signing secrets at rest (ADR 0018): made, sealed under the keyring's
newest key, opened to sign a delivery or to show a stored answer again, and sealed anew by
`paycore secrets rotate`. Reached through `webhooks.service`, which exports what others call."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection

from paycore.idempotency import service as idempotency
from paycore.keyring import Keyring, SecretUnreadable, is_sealed
from paycore.webhooks import repository
from paycore.webhooks.models import SECRET_LENGTH
from paycore.webhooks.types import Endpoint

log = logging.getLogger(__name__)

SECRET_PREFIX: Final = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def _secret_context(tenant_id: str, endpoint_id: str) -> str:
    """What a sealed secret is bound to: its endpoint (either column, and the stored answer)."""
    return f"webhook_endpoint:{tenant_id}:{endpoint_id}"


def sealed(keyring: Keyring, tenant_id: str, endpoint_id: str, secret: str) -> str:
    sealed = keyring.seal(secret, _secret_context(tenant_id, endpoint_id))
    assert len(sealed) <= SECRET_LENGTH, "a sealed secret fits its column (migration 0015)"
    return sealed


def signing_secrets(keyring: Keyring, endpoint: Endpoint, now_us: int) -> tuple[str, ...]:
    """The secrets a delivery is signed with now (`Endpoint.secrets`), opened. Raises
    SecretUnreadable when the current one does not open (PAYCORE_SECRETS_KEY lacks its key); a
    previous one that does not open is left out, so that a tenant's `rotate_secret` after a key
    was lost brings its deliveries back at once."""
    context = _secret_context(endpoint.tenant_id, endpoint.id)
    current, *previous = endpoint.secrets(now_us)
    opened = [keyring.open(current, context)]
    for stored in previous:
        try:
            opened.append(keyring.open(stored, context))
        except SecretUnreadable as error:
            log.warning(
                "webhook endpoint %s: its previous signing secret cannot be opened (%s); signing with the current one",
                endpoint.id,
                error,
                extra={
                    "event": "webhook_secret_unreadable",
                    "tenant_id": endpoint.tenant_id,
                    "endpoint_id": endpoint.id,
                },
            )
    return tuple(opened)


def _dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)  # as the HTTP layer writes answers


def _answer_secret(body: str) -> tuple[dict[str, Any], str] | None:
    """(the answer, its endpoint's id) if the stored answer is an endpoint with its secret."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    if not isinstance(answer, dict) or answer.get("object") != "webhook_endpoint":
        return None
    endpoint_id, secret = answer.get("id"), answer.get("secret")
    if not isinstance(endpoint_id, str) or not isinstance(secret, str):
        return None
    return answer, endpoint_id


def shown_answer(keyring: Keyring, tenant_id: str, body: str) -> str:
    """The answer of a request that made a secret (create, rotate_secret), as the client sees it:
    the stored answer holds the secret sealed; this opens it. Any other answer is unchanged."""
    found = _answer_secret(body)
    if found is None:
        return body
    answer, endpoint_id = found
    answer["secret"] = keyring.open(answer["secret"], _secret_context(tenant_id, endpoint_id))
    return _dumps(answer)


@dataclass(frozen=True)
class Resealed:
    """One batch of `paycore secrets rotate`: what it looked at and what it did."""

    examined: int  # rows read: endpoints, or stored answers
    resealed: int  # secrets sealed again under the newest key
    in_clear: int  # of those, written in clear before ADR 0018
    unreadable: int  # sealed under a key PAYCORE_SECRETS_KEY lacks: left as they are
    changed: int  # changed by a request while this batch ran: left to that request (run again to see)
    after: tuple[str, str] | None  # where the next batch starts; None: done


def reseal_endpoints(
    connection: Connection, keyring: Keyring, *, after: tuple[str, str] | None, limit: int
) -> Resealed:
    """Seal the secrets of the next `limit` endpoints (by tenant and id, every status) under the
    newest key, those in clear included. A row changes only if its secrets are still the ones
    read: a rotation by its tenant meanwhile wins (it sealed its own)."""
    rows = repository.endpoint_secrets(connection, after=after, limit=limit)
    resealed = in_clear = unreadable = changed = 0
    for row in rows:
        context = _secret_context(row.tenant_id, row.id)
        values: dict[str, str] = {}
        for column in ("secret", "previous_secret"):
            stored = row._mapping[column]
            if stored is None or keyring.is_current(stored):
                continue
            try:
                values[column] = sealed(keyring, row.tenant_id, row.id, keyring.open(stored, context))
            except SecretUnreadable:
                unreadable += 1
        if not values:
            continue
        if repository.replace_secrets(connection, row.tenant_id, row.id, row.secret, row.previous_secret, values):
            resealed += len(values)
            in_clear += sum(not is_sealed(row._mapping[column]) for column in values)
        else:
            changed += 1
    keys = [(row.tenant_id, row.id) for row in rows]
    return Resealed(len(rows), resealed, in_clear, unreadable, changed, _next(keys, limit))


ANSWER_MARKER = '"object":"webhook_endpoint"'  # in every stored answer that can hold a secret


def reseal_answers(connection: Connection, keyring: Keyring, *, after: tuple[str, str] | None, limit: int) -> Resealed:
    """Seal the secret in the stored answers among the next `limit` idempotency keys (creates
    and rotations of endpoints) under the newest key, those in clear included; an answer
    changes only if it is still the one read."""
    answers = idempotency.stored_answers(connection, after=after, limit=limit, containing=ANSWER_MARKER)
    resealed = in_clear = unreadable = changed = 0
    for answer in answers:
        if answer.body is None:
            continue  # not an endpoint's answer: the database kept its body to itself
        found = _answer_secret(answer.body)
        if found is None or keyring.is_current(found[0]["secret"]):
            continue
        body, endpoint_id = found
        stored = body["secret"]
        try:
            opened = keyring.open(stored, _secret_context(answer.tenant_id, endpoint_id))
        except SecretUnreadable:
            unreadable += 1
            continue
        body["secret"] = sealed(keyring, answer.tenant_id, endpoint_id, opened)
        if idempotency.replace_answer(connection, answer.tenant_id, answer.key, was=answer.body, now=_dumps(body)):
            resealed += 1
            in_clear += not is_sealed(stored)
        else:
            changed += 1
    keys = [(answer.tenant_id, answer.key) for answer in answers]
    return Resealed(len(answers), resealed, in_clear, unreadable, changed, _next(keys, limit))


def _next(keys: Sequence[tuple[str, str]], limit: int) -> tuple[str, str] | None:
    """Where the next page starts: after the last key of a full page; None after a short one."""
    return keys[-1] if len(keys) == limit else None
