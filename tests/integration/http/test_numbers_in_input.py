"""A number in a header or a query string is written in ASCII digits (paycore.kit.numbers): any
other digit is a 400 with a stable code, never a 500. `"²".isdigit()` is true and `int("²")`
raises: the processor's webhook took `Paycore-Signature: t=²,v1=00` from anyone, unauthenticated,
to a 500; so did a `v1=` signature with a byte above 0x7F (`hmac.compare_digest` raises on a
str outside ASCII). Sent over a raw socket to a real server, as an attacker would: no client
library sends a header byte above 0x7F."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.http.app import create_app
from tests.support.raw_http import assert_json_error, exchange
from tests.support.servers import serve_in_thread

# Header bytes as Starlette reads them (latin-1): the superscripts pass `str.isdigit()`; the
# others are UTF-8 of other scripts' digits, fractions and a fullwidth digit, read as latin-1.
OTHER_DIGITS = ["²", "³", "¹", "¼", "\u0661", "\u0663", "\uff11", "\u2460", "\U0001d7d8"]


@pytest.fixture
def port(settings: Settings, database: Database) -> Iterator[int]:
    migrate.upgrade(database)
    with serve_in_thread(create_app(settings, database)) as url:
        yield int(url.rsplit(":", 1)[1])


def _webhook(port: int, signature: bytes) -> tuple[int, bytes]:
    body = b'{"id": "evt_1", "type": "charge.succeeded", "data": {}}'
    head = (
        b"POST /v1/webhooks/processor HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Paycore-Signature: " + signature + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    status, _, answer = exchange(port, head + body)
    return status, answer


@pytest.mark.parametrize("digit", OTHER_DIGITS)
def test_a_signature_timestamp_in_other_digits_is_400_invalid_signature_not_500(port: int, digit: str) -> None:
    # latin-1 where the character has a byte of its own (the superscripts pass isdigit there),
    # else its UTF-8 bytes.
    raw = digit.encode("latin-1") if ord(digit) < 0x100 else digit.encode()
    for signature in (b"t=" + raw + b",v1=00", b"t=1" + raw + b",v1=" + b"0" * 64, b"t=" + raw * 3 + b",v1=ab"):
        status, answer = _webhook(port, signature)
        assert status == 400, (signature, status, answer)
        assert_json_error(answer, "invalid_signature")


def test_a_signature_timestamp_that_int_would_read_is_refused(port: int) -> None:
    for written in (b"+1", b" 1", b"1_0", b"0x1", b"-1", b"1" * 13, b""):
        status, answer = _webhook(port, b"t=" + written + b",v1=" + b"0" * 64)
        assert status == 400, (written, status, answer)
        assert_json_error(answer, "invalid_signature")


@pytest.mark.parametrize("written", ["²", "\u0661", "\uff11", "1_0", "+5", " 5", "5 ", "5.0", "-1"])
def test_a_limit_not_written_in_ascii_digits_is_400(client: TestClient, written: str) -> None:
    for path in ("/v1/payments", "/v1/audit_events", "/v1/reports/losses"):
        answer = client.get(path, params={"limit": written})
        assert answer.status_code == 400, (path, written, answer.text)
        assert answer.json()["error"] == "invalid_request" and answer.json()["param"] == "limit", answer.text
    assert client.get("/v1/payments", params={"limit": "5"}).status_code == 200


@pytest.mark.parametrize("written", [b"\xb2", b"\xff" * 64, "\u0661".encode(), b"abc\xe9"])
def test_a_signature_with_a_byte_above_0x7f_is_400_invalid_signature_not_500(port: int, written: bytes) -> None:
    now = str(int(time.time())).encode()  # within the tolerance: the signature itself is compared
    status, answer = _webhook(port, b"t=" + now + b",v1=" + written)
    assert status == 400, (written, status, answer)
    assert_json_error(answer, "invalid_signature")


def test_every_limit_is_documented_as_a_bounded_integer(client: TestClient) -> None:
    """The strict reader of `limit` must not change what the document says of it (a Pydantic
    validator put before FastAPI's `Query` made it `ge`/`le`, which no JSON Schema reader knows)."""
    document = client.get("/openapi.json").json()
    limits = [
        (path, parameter["schema"])
        for path, operations in document["paths"].items()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "limit"
    ]
    assert len(limits) >= 10, limits
    for path, schema in limits:
        assert schema["type"] == "integer" and schema["minimum"] == 1 and schema["maximum"] >= 20, (path, schema)
        assert "ge" not in schema and "le" not in schema, (path, schema)
