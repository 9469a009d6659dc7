"""The webhook sink's wire (`paycore_sandbox.sink_connection`): the bytes it sends are the ones
`http.client` sent, and every way an answer can end is read as `http.client` read it, against
a raw socket server that records what came and answers exactly the bytes a test gives; https
with the certificate checked by name, over a kept-alive connection."""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from paycore_sandbox import http_sink
from paycore_sandbox import sink as sink_module
from tests.support.receiver import Receiver

BODY = b'{"id":"evt_sbx_1","type":"charge.succeeded"}'
HEADERS = {"Content-Type": "application/json", "Paycore-Signature": "t=1,v1=ab", "User-Agent": "paycore-sandbox"}
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


class RawServer:
    """Accepts connections; reads each request whole (by its Content-Length), records its bytes,
    and sends the next of `answers` (then closes the connection if the answer says `close`)."""

    def __init__(self, answers: list[tuple[bytes, bool]]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._listener.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while self.answers:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            with connection:
                while self.answers:
                    request = _read_request(connection)
                    if request is None:
                        break
                    self.requests.append(request)
                    answer, close = self.answers.pop(0)
                    connection.sendall(answer)
                    if close:
                        break


def _read_request(connection: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65_536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += connection.recv(65_536)
    return head + b"\r\n\r\n" + body


@pytest.fixture
def http_client_bytes() -> Iterator[bytes]:
    """What `http.client` sends for the same delivery, as the sink sent it before."""
    with RawServer([(OK, True)]) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
        connection.request("POST", "/v1/webhooks/processor?x=1", body=BODY, headers=HEADERS)
        assert connection.getresponse().status == 200
        connection.close()
        yield server.requests[0].replace(str(server.port).encode(), b"PORT")


def test_the_request_is_byte_for_byte_what_http_client_sent(http_client_bytes: bytes) -> None:
    with RawServer([(OK, True)]) as server:
        sink = http_sink(f"http://127.0.0.1:{server.port}/v1/webhooks/processor?x=1")
        assert sink(BODY, HEADERS) == 200
        sink.close()
    assert server.requests[0].replace(str(server.port).encode(), b"PORT") == http_client_bytes


@pytest.mark.parametrize(
    ("answer", "reused"),
    [
        (OK, True),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", True),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", False),
        (OK + b"HTTP/1.1 200 OK\r\n", False),  # more than the answer: not reused
    ],
)
def test_an_answer_of_known_length_keeps_its_connection_if_it_may(answer: bytes, reused: bool) -> None:
    with RawServer([(answer, False), (OK, True)]) as server:
        sink = http_sink(f"http://127.0.0.1:{server.port}/hook", timeout_ms=2_000)
        assert sink(BODY, HEADERS) in (200, 202)
        assert sink(BODY, HEADERS) == 200
        sink.close()
    assert server.connections == (1 if reused else 2)


def test_an_answer_ended_by_its_connection_is_read_to_the_end() -> None:
    with RawServer([(b"HTTP/1.1 500 Internal Server Error\r\n\r\nbroken", True)]) as server:
        assert http_sink(f"http://127.0.0.1:{server.port}/hook", timeout_ms=2_000)(BODY, HEADERS) == 500


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"", http.client.RemoteDisconnected),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", http.client.IncompleteRead),
        (b"HTTP/1.1 200 OK\r\nContent-", http.client.IncompleteRead),
        (b"SMTP ready\r\n\r\n", http.client.BadStatusLine),
    ],
)
def test_an_answer_cut_short_or_not_http_fails_as_http_client_failed(answer: bytes, error: type[Exception]) -> None:
    with RawServer([(answer, True)]) as server, pytest.raises(error):
        http_sink(f"http://127.0.0.1:{server.port}/hook", timeout_ms=2_000)(BODY, HEADERS)


def test_a_path_or_header_http_client_refused_is_refused() -> None:
    with pytest.raises(http.client.InvalidURL):
        http_sink("http://127.0.0.1:9/a b")(BODY, HEADERS)
    with pytest.raises(ValueError, match="invalid header"):
        http_sink("http://127.0.0.1:9/hook")(BODY, {"X-Injected": "1\r\nHost: elsewhere"})


@pytest.fixture
def localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """ "localhost" resolves to 127.0.0.1 only, where the receiver listens."""
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "localhost" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for the name "localhost" only."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("sink-tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_receiver(certificate: tuple[Path, Path]) -> Iterator[Receiver]:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*certificate)
    with Receiver(tls=server_context, keep_alive=True) as started:
        yield started


@pytest.mark.usefixtures("localhost")
def test_https_checks_the_certificate_by_name_and_keeps_its_connection(
    tls_receiver: Receiver, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    trusting.set_alpn_protocols(["http/1.1"])
    monkeypatch.setattr(sink_module, "_tls_context", lambda: trusting)
    sink = http_sink(f"https://localhost:{tls_receiver.port}/hook", timeout_ms=2_000)
    assert [sink(BODY, HEADERS), sink(BODY, HEADERS)] == [200, 200]
    sink.close()
    assert tls_receiver.connections == 1
    assert [found.headers["host"] for found in tls_receiver.wait_for(2)] == [f"localhost:{tls_receiver.port}"] * 2


@pytest.mark.usefixtures("localhost")
def test_https_refuses_an_untrusted_certificate(tls_receiver: Receiver) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        http_sink(f"https://localhost:{tls_receiver.port}/hook", timeout_ms=2_000)(BODY, HEADERS)
    assert tls_receiver.received == []
