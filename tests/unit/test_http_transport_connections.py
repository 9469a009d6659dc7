"""The processor transport's kept-alive connections (`processor/connections.py`): a call reuses
the connection the last answer left open, and is still sent exactly once whatever happens to
that connection."""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from paycore.processor import connections
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import CancelRequest, CaptureRequest, ChargeRequest, ProcessorUnreachable


@dataclass
class Seen:
    ports: list[int] = field(default_factory=list)  # the client's port of each request received
    close_after: set[int] = field(default_factory=set)  # the request numbers answered and then closed
    lose_answer: set[int] = field(default_factory=set)  # the request numbers read and never answered
    hold_s: dict[int, float] = field(default_factory=dict)  # the request numbers answered this late
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)  # (line, headers, body)


@pytest.fixture
def processor() -> Iterator[tuple[str, Seen]]:
    seen = Seen()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps connections alive, as `paycore processor serve`

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.requests.append((self.requestline, dict(self.headers.items()), body))
            seen.ports.append(self.client_address[1])
            number = len(seen.ports)
            if number in seen.hold_s:
                time.sleep(seen.hold_s[number])
            if number in seen.lose_answer:
                self.close_connection = True
                return
            request_id = f"pay_{number}"
            body = json.dumps(
                {
                    "request_id": request_id,
                    "status": "succeeded",
                    "processor_charge_id": f"ch_{number}",
                    "amount_minor": 100,
                    "currency": "USD",
                    "failure_code": None,
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            if number in seen.close_after:
                self.close_connection = True  # closed once answered, without saying so

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host!s}:{port}", seen
    server.shutdown()
    server.server_close()


def charge(number: int) -> ChargeRequest:
    return ChargeRequest(
        request_id=f"pay_{number}",
        merchant_id="acme",
        amount_minor=100,
        currency="USD",
        token="tok_ok",
        description=None,
    )


def test_calls_reuse_one_kept_alive_connection(processor: tuple[str, Seen]) -> None:
    url, seen = processor
    transport = HttpTransport(url, timeout_ms=5_000)
    for number in (1, 2, 3):
        assert transport.charge(charge(number)).status == "succeeded"
    assert len(seen.ports) == 3 and len(set(seen.ports)) == 1, seen.ports
    transport.close()


def test_a_connection_the_processor_closed_is_not_sent_on(processor: tuple[str, Seen]) -> None:
    url, seen = processor
    seen.close_after.add(1)
    transport = HttpTransport(url, timeout_ms=5_000)
    assert transport.charge(charge(1)).status == "succeeded"
    for _ in range(100):  # the close reaches this side
        kept = transport._kept._idle
        if not kept or not connections._still_open(kept[-1][0]):
            break
        threading.Event().wait(0.01)
    assert transport.charge(charge(2)).status == "succeeded"
    assert len(seen.ports) == 2 and seen.ports[0] != seen.ports[1], seen.ports
    transport.close()


def test_a_connection_idle_too_long_is_not_reused(processor: tuple[str, Seen], monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen = processor
    transport = HttpTransport(url, timeout_ms=5_000)
    assert transport.charge(charge(1)).status == "succeeded"
    monkeypatch.setattr(connections, "IDLE_MS_MAX", 0)
    threading.Event().wait(0.01)
    assert transport.charge(charge(2)).status == "succeeded"
    assert len(seen.ports) == 2 and seen.ports[0] != seen.ports[1], seen.ports
    transport.close()


def test_an_answer_lost_on_a_kept_connection_is_unreachable_and_never_sent_again(
    processor: tuple[str, Seen],
) -> None:
    url, seen = processor
    seen.lose_answer.add(2)
    transport = HttpTransport(url, timeout_ms=5_000)
    assert transport.charge(charge(1)).status == "succeeded"
    with pytest.raises(ProcessorUnreachable):
        transport.charge(charge(2))
    assert len(seen.ports) == 2 and seen.ports[0] == seen.ports[1], "sent once, on the kept connection"
    assert transport.charge(charge(3)).status == "succeeded"  # on a new connection
    assert len(seen.ports) == 3 and seen.ports[2] != seen.ports[1], seen.ports
    transport.close()


# --- the charge from the event loop (`processor/loop_connections.py`): the same rules ------------


def on_loop(transport: HttpTransport, *numbers: int) -> list[str]:
    """Each charge made from one event loop, in turn: its status, or the error's type name."""

    async def calls() -> list[str]:
        made: list[str] = []
        for number in numbers:
            try:
                made.append((await transport.charge_on_loop(charge(number))).status)
            except ProcessorUnreachable as error:
                made.append(type(error).__name__)
        return made

    return asyncio.run(calls())


def test_charges_from_the_loop_reuse_one_kept_connection_across_loops(processor: tuple[str, Seen]) -> None:
    url, seen = processor
    transport = HttpTransport(url, timeout_ms=5_000)
    assert transport.calls_on_loop
    assert on_loop(transport, 1, 2, 3) == ["succeeded"] * 3
    assert on_loop(transport, 4) == ["succeeded"]  # another loop: the socket is no loop's
    assert len(seen.ports) == 4 and len(set(seen.ports)) == 1, seen.ports
    transport.close()


def test_the_loop_reads_the_answer_as_the_thread_does(processor: tuple[str, Seen]) -> None:
    url, _ = processor
    transport = HttpTransport(url, timeout_ms=5_000)
    by_thread = transport.charge(charge(1))
    by_loop = asyncio.run(transport.charge_on_loop(charge(2)))
    assert by_loop == dataclasses.replace(by_thread, request_id="pay_2", processor_charge_id="ch_2")
    transport.close()


def test_an_answer_lost_on_the_loop_is_unreachable_and_never_sent_again(processor: tuple[str, Seen]) -> None:
    url, seen = processor
    seen.lose_answer.add(2)
    transport = HttpTransport(url, timeout_ms=5_000)
    assert on_loop(transport, 1, 2, 3) == ["succeeded", "ProcessorUnreachable", "succeeded"]
    assert len(seen.ports) == 3 and seen.ports[0] == seen.ports[1] != seen.ports[2], seen.ports
    transport.close()


def test_an_answer_later_than_the_timeout_is_unreachable_within_it(processor: tuple[str, Seen]) -> None:
    url, seen = processor
    seen.hold_s[2] = 1.0
    transport = HttpTransport(url, timeout_ms=200)
    started = time.monotonic()
    assert on_loop(transport, 1, 2) == ["succeeded", "ProcessorUnreachable"]
    assert time.monotonic() - started < 0.9, "bounded by the timeout, not by the answer"
    assert len(seen.ports) == 2, "sent once"
    transport.close()


def test_a_connection_idle_too_long_is_not_reused_from_the_loop(
    processor: tuple[str, Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = processor
    transport = HttpTransport(url, timeout_ms=5_000)
    assert on_loop(transport, 1) == ["succeeded"]
    monkeypatch.setattr(connections, "IDLE_MS_MAX", 0)
    threading.Event().wait(0.01)
    assert on_loop(transport, 2) == ["succeeded"]
    assert len(seen.ports) == 2 and seen.ports[0] != seen.ports[1], seen.ports
    transport.close()


def test_a_processor_that_cannot_be_reached_is_unreachable_from_the_loop() -> None:
    transport = HttpTransport("http://127.0.0.1:9", timeout_ms=1_000)  # the discard port: nobody listens
    assert on_loop(transport, 1) == ["ProcessorUnreachable"]
    assert not HttpTransport("https://127.0.0.1:9").calls_on_loop  # HTTPS stays on a thread


def test_a_capture_and_a_cancel_from_the_loop_are_the_threads_requests_and_answers(
    processor: tuple[str, Seen],
) -> None:
    """`capture_on_loop` and `cancel_on_loop` send what `capture` and `cancel` send (the request
    line, the headers, the body's bytes) and read the answer alike."""
    url, seen = processor
    transport = HttpTransport(url, timeout_ms=5_000)
    capture = CaptureRequest("pay_1_capture", "acme", "ch_1", 60, "USD")
    cancel = CancelRequest("pay_2_cancel", "acme", "ch_2")
    by_thread = [transport.capture(capture), transport.cancel(cancel)]

    async def calls() -> list[object]:
        return [await transport.capture_on_loop(capture), await transport.cancel_on_loop(cancel)]

    by_loop = asyncio.run(calls())
    numbered = {"pay_1": "pay_3", "ch_1": "ch_3", "pay_2": "pay_4", "ch_2": "ch_4"}
    assert by_loop == [
        dataclasses.replace(
            answer, request_id=numbered[answer.request_id], processor_charge_id=numbered[answer.processor_charge_id]
        )
        for answer in by_thread
    ]
    thread_requests, loop_requests = seen.requests[:2], seen.requests[2:]
    assert [line for line, _, _ in thread_requests] == ["POST /v1/captures HTTP/1.1", "POST /v1/cancellations HTTP/1.1"]
    assert loop_requests == thread_requests
    assert json.loads(thread_requests[0][2]) == dataclasses.asdict(capture)
    transport.close()
