"""One delivery attempt against a real HTTP server (tests/support/receiver.py) in each of the
ways a tenant's endpoint can behave: answer, fail, hang, close, redirect, answer too much,
dribble. Time bounds are generous (a noisy 2-core machine), but each is well below what the
behaviour without the bound would take (the receiver hangs for 10 s)."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paycore.webhooks import transport
from tests.support.receiver import OK_BODY, Receiver

BODY = b'{"id":"evt_1","type":"payment.succeeded"}'
HEADERS = {"Paycore-Signature": "t=1,v1=abc", "Paycore-Event-Id": "evt_1"}
HANG_S = 10.0  # what the receiver would hold a client without a bound
ELAPSED_S_MAX = 4.0  # the bound under test is 2 x 0.3 s; the rest is a slow machine's slack


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        started.hang_s = HANG_S
        yield started


def _post(url: str, *, timeout_ms: int = 5_000, local_mode: bool = True, **kwargs: Any) -> transport.Answer:
    return transport.post(url, BODY, HEADERS, timeout_ms=timeout_ms, local_mode=local_mode, **kwargs)


def test_ok_is_the_status_and_the_body(receiver: Receiver) -> None:
    answer = _post(receiver.url + "?tenant=acme")
    assert answer == transport.Answer(200, answer.latency_ms, None, OK_BODY.decode())
    [received] = receiver.wait_for(1)
    assert received.path == "/hook?tenant=acme"
    assert received.body == BODY
    assert received.headers["host"] == f"127.0.0.1:{receiver.port}"
    assert received.headers["content-type"] == "application/json"
    assert received.headers["user-agent"] == transport.USER_AGENT
    assert received.headers["content-length"] == str(len(BODY))
    assert received.headers["paycore-signature"] == "t=1,v1=abc"
    assert received.headers["paycore-event-id"] == "evt_1"


def test_a_500_is_an_answer(receiver: Receiver) -> None:
    receiver.answer("error_500")
    answer = _post(receiver.url)
    assert (answer.status_code, answer.error) == (500, None)
    assert "internal" in answer.excerpt


def test_a_hanging_endpoint_is_a_timeout(receiver: Receiver) -> None:
    receiver.answer("timeout")
    started = time.monotonic()
    answer = _post(receiver.url, timeout_ms=300)
    elapsed_s = time.monotonic() - started
    assert (answer.status_code, answer.error) == (None, "timeout")
    assert elapsed_s < ELAPSED_S_MAX
    assert answer.latency_ms >= 250  # the timeout, not an early give-up
    assert len(receiver.received) == 1 and receiver.delivered() == []


def test_a_slow_answer_within_the_timeout_is_received(receiver: Receiver) -> None:
    receiver.slow_s = 0.2
    receiver.answer("slow_ok")
    answer = _post(receiver.url, timeout_ms=5_000)
    assert (answer.status_code, answer.error) == (200, None)
    assert answer.latency_ms >= 190
    assert len(receiver.wait_for(1)) == 1


def test_a_closed_connection_is_no_answer(receiver: Receiver) -> None:
    receiver.answer("close")
    answer = _post(receiver.url)
    assert (answer.status_code, answer.error) == (None, "connection_closed")
    assert len(receiver.received) == 1


def test_a_redirect_is_returned_never_followed(receiver: Receiver) -> None:
    receiver.answer("redirect")
    answer = _post(receiver.url)
    assert (answer.status_code, answer.error) == (302, None)
    time.sleep(0.2)  # a client following it would have asked before returning; this is for a stray thread
    assert [found.path for found in receiver.received] == ["/hook"]


@pytest.mark.parametrize("excerpt_bytes_max", [0, 1, 100, 1024])
def test_the_excerpt_is_bounded(receiver: Receiver, excerpt_bytes_max: int) -> None:
    receiver.answer("large_ok")
    answer = _post(receiver.url, excerpt_bytes_max=excerpt_bytes_max)
    assert (answer.status_code, answer.error) == (200, None)
    assert answer.excerpt == "x" * excerpt_bytes_max


def test_dribbled_headers_are_bounded_by_the_exchange(receiver: Receiver) -> None:
    """Each byte comes well within the timeout: only the whole exchange's bound stops it."""
    receiver.dribble_s = 0.05
    receiver.answer("dribble_headers")
    started = time.monotonic()
    answer = _post(receiver.url, timeout_ms=300)
    assert (answer.status_code, answer.error) == (None, "timeout")
    assert time.monotonic() - started < ELAPSED_S_MAX


def test_a_dribbled_body_is_bounded_and_the_status_kept(receiver: Receiver) -> None:
    receiver.dribble_s = 0.05
    receiver.answer("dribble_body")
    started = time.monotonic()
    answer = _post(receiver.url, timeout_ms=300)
    assert (answer.status_code, answer.error) == (200, None)
    assert time.monotonic() - started < ELAPSED_S_MAX
    assert set(answer.excerpt) <= {"x"}


def test_a_loopback_endpoint_outside_local_mode_gets_nothing(receiver: Receiver) -> None:
    for url in (receiver.url, receiver.url.replace("http://127.0.0.1", "https://localhost")):
        answer = _post(url, local_mode=False)
        assert (answer.status_code, answer.error) == (None, "unsafe_address")
        assert "s3cr3t" not in answer.excerpt
    assert receiver.received == []


def test_http_outside_local_mode_is_refused_before_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_connection(*args: object, **kwargs: object) -> socket.socket:
        raise AssertionError("no connection may be opened")

    monkeypatch.setattr(socket, "create_connection", no_connection)
    answer = _post("http://8.8.8.8/hook", local_mode=False)
    assert (answer.status_code, answer.error) == (None, "invalid_url")


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every connection the transport tries to open; none is opened."""
    tried: list[object] = []

    def no_connection(address: object, *args: object, **kwargs: object) -> socket.socket:
        tried.append(address)
        raise AssertionError("no connection may be opened")

    monkeypatch.setattr(socket, "create_connection", no_connection)
    return tried


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "https://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/hook",
        "https://10.0.0.1:8443/hook",
        "http://100.64.0.1/hook",
        "http://[::ffff:169.254.169.254]/hook",
        "http://[fd00:ec2::254]/hook",
    ],
)
def test_internal_addresses_are_refused_in_local_mode_before_connecting(url: str, connections: list[object]) -> None:
    """Issue 29, finding 7: local mode adds loopback receivers and nothing else."""
    answer = _post(url, local_mode=True)
    assert (answer.status_code, answer.error) == (None, "unsafe_address")
    assert connections == []


def test_http_to_a_public_address_is_refused_in_local_mode_too(connections: list[object]) -> None:
    answer = _post("http://8.8.8.8/hook", local_mode=True)
    assert (answer.status_code, answer.error) == (None, "invalid_url")
    assert connections == []


@pytest.mark.parametrize("url", ["", "not a url", "ftp://example.com/", "http:///hook", "http://a:99999/"])
def test_an_unusable_url_is_an_answer(url: str) -> None:
    answer = _post(url)
    assert (answer.status_code, answer.error) == (None, "invalid_url")


def test_a_closed_port_is_connection_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    answer = _post(f"http://127.0.0.1:{port}/hook")
    assert (answer.status_code, answer.error) == (None, "connection_refused")


def test_tls_to_a_plain_http_server_is_a_tls_error(receiver: Receiver) -> None:
    answer = _post(receiver.url.replace("http://", "https://"))
    assert (answer.status_code, answer.error) == (None, "tls_error")
    assert receiver.received == []


# --- TLS: the connection is pinned to the vetted address, the certificate checked by name ---


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for the name "localhost" only (no IP address in it)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
               "-addext", "subjectAltName=DNS:localhost"]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture
def tls_receiver(certificate: tuple[Path, Path]) -> Iterator[Receiver]:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*certificate)
    with Receiver(tls=server_context) as started:
        yield started


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every name looked up; "localhost" resolves to 127.0.0.1 only (the receiver's address)."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)
        return real("127.0.0.1" if host == "localhost" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_tls_connects_to_the_vetted_address_and_checks_the_name(
    tls_receiver: Receiver, certificate: tuple[Path, Path], lookups: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    monkeypatch.setattr(transport, "_tls_context", lambda: trusting)
    answer = _post(f"https://localhost:{tls_receiver.port}/hook")
    assert (answer.status_code, answer.error) == (200, None)
    assert lookups.count("localhost") == 1  # the guard's look-up; the connection reused its address
    [received] = tls_receiver.wait_for(1)
    assert received.headers["host"] == f"localhost:{tls_receiver.port}"


def test_tls_refuses_a_certificate_for_another_name(
    tls_receiver: Receiver, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same server by its address: the certificate names "localhost", not 127.0.0.1."""
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    monkeypatch.setattr(transport, "_tls_context", lambda: trusting)
    answer = _post(tls_receiver.url)
    assert (answer.status_code, answer.error) == (None, "tls_error")
    assert tls_receiver.received == []


def test_tls_refuses_an_untrusted_certificate(tls_receiver: Receiver, lookups: list[str]) -> None:
    answer = _post(f"https://localhost:{tls_receiver.port}/hook")
    assert (answer.status_code, answer.error) == (None, "tls_error")
    assert "certificate" in answer.excerpt
    assert tls_receiver.received == []
