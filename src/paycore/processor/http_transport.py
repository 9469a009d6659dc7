"""The HTTP transport: the provider port spoken to a processor's HTTP API (the sandbox's,
served by `paycore processor serve`), with the standard library's `http.client`.

Every call is sent once, on a kept-alive connection (`connections.py`: one idle for less
than a second that the processor has not closed) or a new one, bounded by `timeout_ms` to
connect and again to wait for the answer. The answer is classified the safe way, so that "did nothing" is only ever
claimed on the processor's word:
- 2xx with a readable result → the result;
- 404 `{"error": "not_found"}` on a GET by request id → None (no record, yet);
- any other 4xx with a JSON error body `{"error": code, "message": ...}` → ProcessorRefused;
- timeouts, connection errors, 5xx, and anything unreadable → ProcessorUnreachable; an answer
  that repeats a key within one JSON object is unreadable (which of the two amounts did the
  processor mean?), read by `paycore.kit.strict_json` as every JSON paycore is sent.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any, Final

from paycore.kit import logs, strict_json
from paycore.processor.connections import ConnectionPool
from paycore.processor.loop_connections import LoopConnections
from paycore.processor.port import (
    CAPTURE_METHODS,
    CHARGE_STATUSES,
    DISPUTE_STATUSES,
    DISPUTE_TYPES,
    PAYOUT_STATUSES,
    RESULT_STATUSES,
    AcceptRequest,
    CancelRequest,
    CaptureRequest,
    ChargeRequest,
    ChargeResult,
    DisputeResult,
    EvidenceRequest,
    PayoutRequest,
    PayoutResult,
    ProcessorRefused,
    ProcessorUnreachable,
    RefundRequest,
    RefundResult,
    charge_request_fields,
)

ANSWER_BYTES_MAX: Final = 1_048_576
LINE_BYTES_MAX: Final = 65_536
_MESSAGE_LENGTH_MAX: Final = 1000
_NETWORK_ERRORS: Final = (OSError, http.client.HTTPException)
# `json.dumps(body, separators=(",", ":"))` without making its encoder for each request.
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"))
DISPUTES_OF_CHARGE_MAX: Final = 10  # a charge has at most one dispute at the sandbox; a bound all the same


class HttpTransport:
    def __init__(self, base_url: str, timeout_ms: int = 5_000) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"processor url must be http(s)://host[:port][/prefix], got {base_url!r}")
        assert timeout_ms >= 1
        self.base_url = base_url
        self.timeout_ms = timeout_ms
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._kept = ConnectionPool()
        # The charge, capture and cancel from the event loop (`charge_on_loop`, ...): plain HTTP
        # only; HTTPS stays on a thread.
        self.calls_on_loop = not self._https
        self._on_loop = LoopConnections(self._host, self._port or 80, ANSWER_BYTES_MAX)
        host = f"[{self._host}]" if ":" in self._host else self._host  # an IPv6 address, as http.client writes it
        self._host_header = host if self._port in (None, 80) else f"{host}:{self._port}"

    def charge(self, request: ChargeRequest) -> ChargeResult:
        status, payload = self._exchange("POST", "/v1/charges", charge_request_fields(request))
        return _charge_result(self._expect_result("charge", status, payload))

    async def charge_on_loop(self, request: ChargeRequest) -> ChargeResult:
        """`charge`, from the event loop and without a thread (`_exchange_on_loop`). Only when
        `calls_on_loop` (plain HTTP)."""
        status, payload = await self._exchange_on_loop("POST", "/v1/charges", charge_request_fields(request))
        return _charge_result(self._expect_result("charge", status, payload))

    def capture(self, request: CaptureRequest) -> ChargeResult:
        status, payload = self._exchange("POST", "/v1/captures", dataclasses.asdict(request))
        return _charge_result(self._expect_result("capture", status, payload))

    def cancel(self, request: CancelRequest) -> ChargeResult:
        status, payload = self._exchange("POST", "/v1/cancellations", dataclasses.asdict(request))
        return _charge_result(self._expect_result("cancel", status, payload))

    async def capture_on_loop(self, request: CaptureRequest) -> ChargeResult:
        """`capture`, from the event loop and without a thread (`_exchange_on_loop`)."""
        status, payload = await self._exchange_on_loop("POST", "/v1/captures", dataclasses.asdict(request))
        return _charge_result(self._expect_result("capture", status, payload))

    async def cancel_on_loop(self, request: CancelRequest) -> ChargeResult:
        """`cancel`, from the event loop and without a thread (`_exchange_on_loop`)."""
        status, payload = await self._exchange_on_loop("POST", "/v1/cancellations", dataclasses.asdict(request))
        return _charge_result(self._expect_result("cancel", status, payload))

    def get_charge(self, request_id: str) -> ChargeResult | None:
        status, payload = self._exchange("GET", "/v1/charges/" + _segment(request_id))
        if _is_not_found(status, payload):
            return None
        return _charge_result(self._expect_result("get_charge", status, payload))

    def refund(self, request: RefundRequest) -> RefundResult:
        status, payload = self._exchange("POST", "/v1/refunds", dataclasses.asdict(request))
        return _refund_result(self._expect_result("refund", status, payload))

    def get_refund(self, request_id: str) -> RefundResult | None:
        status, payload = self._exchange("GET", "/v1/refunds/" + _segment(request_id))
        if _is_not_found(status, payload):
            return None
        return _refund_result(self._expect_result("get_refund", status, payload))

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        status, payload = self._exchange("POST", "/v1/payouts", dataclasses.asdict(request))
        return _payout_result(self._expect_result("payout", status, payload))

    def get_payout(self, request_id: str) -> PayoutResult | None:
        status, payload = self._exchange("GET", "/v1/payouts/" + _segment(request_id))
        if _is_not_found(status, payload):
            return None
        return _payout_result(self._expect_result("get_payout", status, payload))

    # --- disputes (SPEC §6.2, docs/sandbox.md "Disputes") -------------------------------

    def submit_evidence(self, request: EvidenceRequest) -> DisputeResult:
        body = {"request_id": request.request_id, "merchant_id": request.merchant_id, "text": request.text}
        status, payload = self._exchange("POST", f"/v1/disputes/{_segment(request.dispute_id)}/evidence", body)
        return _dispute_result(self._expect_result("dispute_evidence", status, payload))

    def accept_dispute(self, request: AcceptRequest) -> DisputeResult:
        body = {"request_id": request.request_id, "merchant_id": request.merchant_id}
        status, payload = self._exchange("POST", f"/v1/disputes/{_segment(request.dispute_id)}/accept", body)
        return _dispute_result(self._expect_result("dispute_accept", status, payload))

    def get_dispute(self, dispute_id: str) -> DisputeResult | None:
        status, payload = self._exchange("GET", "/v1/disputes/" + _segment(dispute_id))
        if _is_not_found(status, payload):
            return None
        return _dispute_result(self._expect_result("get_dispute", status, payload))

    def disputes_of_charge(self, charge_request_id: str) -> list[DisputeResult]:
        """The disputes of a charge, by its request id (the sandbox opens at most one)."""
        query = urllib.parse.urlencode({"charge_request_id": charge_request_id})
        status, payload = self._exchange("GET", f"/v1/disputes?{query}")
        found = self._expect_result("disputes_of_charge", status, payload).get("data")
        if not isinstance(found, list) or len(found) > DISPUTES_OF_CHARGE_MAX:
            raise ProcessorUnreachable(f"the processor's answer does not read as a list of disputes: {payload!r:.300}")
        return [_dispute_result(item if isinstance(item, dict) else {}) for item in found]

    def settlement_report(self, day: str) -> Iterator[str]:
        """Ask now (raising as the other calls do); then a generator of the CSV lines as they
        arrive, each with its line ending. A failure half-way is ProcessorUnreachable."""
        connection, response = self._send("GET", f"/v1/settlements/{_segment(day)}.csv", None)
        if response.status == 200:
            return _lines(connection, response)
        try:
            payload = _read_json(response)
        except _NETWORK_ERRORS as error:
            raise ProcessorUnreachable(f"settlement_report: {type(error).__name__}: {error}") from error
        finally:
            connection.close()
        self._expect_result("settlement_report", response.status, payload)
        raise ProcessorUnreachable(f"settlement_report: unexpected HTTP {response.status}")

    # --- one exchange -------------------------------------------------------------------

    def close(self) -> None:
        """Close the kept-alive connections (a later call opens a new one)."""
        self._kept.close()

    def _request_bytes(self, method: str, path: str, body: bytes) -> bytes:
        """The request as `_send` sends it on a kept-alive connection, written out whole."""
        lines = [
            f"{method} {self._prefix}{path} HTTP/1.1",
            f"Host: {self._host_header}",
            "Accept-Encoding: identity",
            "Accept: application/json",
            "User-Agent: paycore",
        ]
        request_id = logs.request_id()
        if request_id is not None and request_id.isprintable() and request_id.isascii():
            lines.append(f"{logs.REQUEST_ID_HEADER}: {request_id}")
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}", "", ""]
        return "\r\n".join(lines).encode("ascii") + body

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None, *, kept: bool = False
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send once and read the answer's head. `kept`: on a kept-alive connection if there is
        one (else a new one, kept alive too); otherwise on a new one closed after the answer."""
        timeout_s = self.timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        connection = self._kept.take() if kept else None
        if connection is None:
            connection_class = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = connection_class(self._host, self._port, timeout=timeout_s)
        elif connection.sock is not None:
            connection.sock.settimeout(timeout_s)
        headers = {"Accept": "application/json", "User-Agent": "paycore"}
        if not kept:
            headers["Connection"] = "close"
        request_id = logs.request_id()
        if request_id is not None:  # the processor's logs can then name the request that caused the call
            headers[logs.REQUEST_ID_HEADER] = request_id
        data = None
        if body is not None:
            data = _COMPACT.encode(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, self._prefix + path, body=data, headers=headers)
            if connection.sock is not None:  # what is left of the bound waits for the answer
                connection.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            return connection, connection.getresponse()
        except _NETWORK_ERRORS as error:
            connection.close()
            raise ProcessorUnreachable(f"{method} {path}: {type(error).__name__}: {error}") from error

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """(status, parsed JSON body or None if it is not JSON)."""
        connection, response = self._send(method, path, body, kept=True)
        try:
            answer = response.status, _read_json(response)
        except _NETWORK_ERRORS as error:
            connection.close()
            raise ProcessorUnreachable(f"{method} {path}: {type(error).__name__}: {error}") from error
        except BaseException:
            connection.close()
            raise
        self._kept.keep(connection, response)
        return answer

    async def _exchange_on_loop(self, method: str, path: str, fields: dict[str, Any]) -> tuple[int, Any]:
        """`_exchange` from the event loop, without a thread: the same request bytes and headers,
        sent once on a kept-alive connection of the loop (`loop_connections.py`), bounded by the
        same timeout; (status, the answer's JSON or None) for the caller to classify as the
        blocking call does (a timeout or a lost answer: ProcessorUnreachable)."""
        assert self.calls_on_loop, "plain HTTP only"
        body = _COMPACT.encode(fields).encode()
        answer = await self._on_loop.exchange(self._request_bytes(method, path, body), self.timeout_ms)
        return answer.status, (None if answer.body is None else _json_of(answer.body))

    @staticmethod
    def _expect_result(op: str, status: int, payload: Any) -> dict[str, Any]:
        if 200 <= status < 300 and isinstance(payload, dict):
            return payload
        if 400 <= status < 500 and _is_error_body(payload):
            raise ProcessorRefused(payload["error"], str(payload.get("message", ""))[:_MESSAGE_LENGTH_MAX])
        raise ProcessorUnreachable(f"{op}: no usable answer (HTTP {status})")


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _read_json(response: http.client.HTTPResponse) -> Any:
    data = response.read(ANSWER_BYTES_MAX + 1)
    if len(data) > ANSWER_BYTES_MAX:
        return None
    return _json_of(data)


def _json_of(data: bytes) -> Any:
    """The answer's JSON, or None when it is not JSON (or repeats a key)."""
    try:
        return strict_json.loads(data)
    except (ValueError, RecursionError, strict_json.DuplicateJsonKey):
        return None


def _is_error_body(payload: Any) -> bool:
    return isinstance(payload, dict) and isinstance(payload.get("error"), str) and bool(payload["error"])


def _is_not_found(status: int, payload: Any) -> bool:
    return status == 404 and _is_error_body(payload) and payload["error"] == "not_found"


def _lines(connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> Iterator[str]:
    try:
        while True:
            line = response.readline(LINE_BYTES_MAX + 1)
            if not line:
                return
            if len(line) > LINE_BYTES_MAX:
                raise ProcessorUnreachable(f"settlement_report: a line is longer than {LINE_BYTES_MAX} bytes")
            # A byte that is not UTF-8 is kept (as a lone surrogate) for the report's reader to
            # name its line: the report is refused, not the connection (docs/reconciliation.md).
            yield line.decode("utf-8", "surrogateescape")
    except _NETWORK_ERRORS as error:
        raise ProcessorUnreachable(f"settlement_report: {type(error).__name__}: {error}") from error
    finally:
        connection.close()


def _checked(payload: dict[str, Any], id_field: str, statuses: tuple[str, ...] = RESULT_STATUSES) -> dict[str, Any]:
    """The result's fields, type-checked: an answer that does not read as a result is no answer."""
    names = ("request_id", "status", id_field, "amount_minor", "currency", "failure_code")
    values = {name: payload.get(name) for name in names}
    strings_ok = all(isinstance(values[name], str) for name in ("request_id", id_field, "currency"))
    failure_ok = values["failure_code"] is None or isinstance(values["failure_code"], str)
    if not (strings_ok and failure_ok and values["status"] in statuses and type(values["amount_minor"]) is int):
        raise ProcessorUnreachable(f"the processor's answer does not read as a result: {payload!r:.300}")
    return values


_AUTHORIZATION_INTS: Final = (
    "amount_capturable_minor",
    "amount_captured_minor",
    "amount_released_minor",
    "authorization_expires_at_us",
)


def _charge_result(payload: dict[str, Any]) -> ChargeResult:
    """A charge, and for an authorization its amounts and expiry (absent: an automatic charge,
    as a processor that predates manual capture answers)."""
    values = _checked(payload, "processor_charge_id", CHARGE_STATUSES)
    capture = payload.get("capture", "automatic")
    extra: dict[str, Any] = {name: payload.get(name) for name in _AUTHORIZATION_INTS}
    readable = capture in CAPTURE_METHODS and all(value is None or type(value) is int for value in extra.values())
    if not readable or (capture == "automatic" and values["status"] not in RESULT_STATUSES):
        raise ProcessorUnreachable(f"the processor's answer does not read as a charge: {payload!r:.300}")
    return ChargeResult(**values, capture=capture, **extra)


def _refund_result(payload: dict[str, Any]) -> RefundResult:
    return RefundResult(**_checked(payload, "processor_refund_id"))


_PAYOUT_STRINGS: Final = ("request_id", "bank_payout_id", "currency")
_PAYOUT_OPTIONAL_STRINGS: Final = ("batch_id", "failure_code", "return_code")
_PAYOUT_AMOUNTS: Final = ("amount_minor", "fee_minor", "return_fee_minor")
_PAYOUT_OPTIONAL_INTS: Final = ("return_amount_minor", "settled_at_us", "returned_at_us")


def _payout_result(payload: dict[str, Any]) -> PayoutResult:
    """A payout result, every field type-checked (an int is never a bool, money never a float)."""
    names = (*_PAYOUT_STRINGS, *_PAYOUT_OPTIONAL_STRINGS, *_PAYOUT_AMOUNTS, *_PAYOUT_OPTIONAL_INTS, "status", "rail")
    values: dict[str, Any] = {name: payload.get(name) for name in names}
    readable = (
        all(isinstance(values[name], str) for name in _PAYOUT_STRINGS)
        and all(values[name] is None or isinstance(values[name], str) for name in _PAYOUT_OPTIONAL_STRINGS)
        and all(type(values[name]) is int for name in _PAYOUT_AMOUNTS)
        and all(values[name] is None or type(values[name]) is int for name in _PAYOUT_OPTIONAL_INTS)
        and values["status"] in PAYOUT_STATUSES
        and values["rail"] in ("ach", "sepa")
    )
    if not readable:
        raise ProcessorUnreachable(f"the bank's answer does not read as a payout result: {payload!r:.300}")
    return PayoutResult(**values)


_DISPUTE_STRINGS: Final = (
    "dispute_id",
    "charge_request_id",
    "payment_reference",
    "merchant_id",
    "reason",
    "currency",
    "evidence_due_by",
    "created_at",
)


def _dispute_result(payload: dict[str, Any]) -> DisputeResult:
    """A dispute, every field type-checked (an amount is an int, never a bool or a float)."""
    names = (*_DISPUTE_STRINGS, "type", "status", "amount_minor", "fee_minor", "evidence_submitted", "closed_at")
    values: dict[str, Any] = {name: payload.get(name) for name in names}
    readable = (
        all(isinstance(values[name], str) for name in _DISPUTE_STRINGS)
        and values["type"] in DISPUTE_TYPES
        and values["status"] in DISPUTE_STATUSES
        and type(values["amount_minor"]) is int
        and type(values["fee_minor"]) is int
        and type(values["evidence_submitted"]) is bool
        and (values["closed_at"] is None or isinstance(values["closed_at"], str))
    )
    if not readable:
        raise ProcessorUnreachable(f"the processor's answer does not read as a dispute: {payload!r:.300}")
    return DisputeResult(**values)
