"""The log formatters and settings (SPEC §12): one JSON object per line, stable keys, every
`extra=` field at the top level, exceptions as text, values JSON cannot hold as `str`."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from paycore.config import Settings, log_options_from_env
from paycore.kit import logs

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing through the JSON formatter into a buffer (not the root logger)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("paycore.test.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines_of(stream: io.StringIO) -> list[dict[str, object]]:
    text = stream.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_a_line_is_one_json_object_with_the_stable_keys_first(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.warning("no answer for %s", "pay_1", extra={"event": "processor_no_answer", "latency_ms": 12})
    [line] = lines_of(stream)
    assert list(line)[:5] == ["ts", "level", "logger", "event", "message"]
    assert RFC3339_UTC.fullmatch(str(line["ts"]))
    assert line["level"] == "warning"
    assert line["logger"] == "paycore.test.logs"
    assert line["event"] == "processor_no_answer"
    assert line["message"] == "no answer for pay_1"
    assert line["latency_ms"] == 12
    assert "request_id" not in line  # none is set outside a request


def test_a_line_without_an_event_is_named_log(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info("plain")
    assert lines_of(stream)[0]["event"] == "log"


def test_the_request_id_of_the_context_is_on_every_line(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    token = logs.set_request_id("req_abc")
    try:
        logger.info("inside")
    finally:
        logs.reset_request_id(token)
    logger.info("outside")
    inside, outside = lines_of(stream)
    assert inside["request_id"] == "req_abc"
    assert "request_id" not in outside
    assert logs.request_id() is None


def test_newlines_and_odd_values_stay_on_one_line(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info("two\nlines", extra={"event": "odd", "amount": Decimal("1"), "things": {1, 2}, "when": object()})
    assert stream.getvalue().count("\n") == 1
    [line] = lines_of(stream)
    assert line["message"] == "two\nlines"
    assert line["amount"] == "1"  # str, never a float
    assert isinstance(line["things"], str) and isinstance(line["when"], str)


def test_a_line_is_ascii_whatever_it_holds(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info("payout to Zoë Müller", extra={"event": "e", "beneficiary": "Émilie"})
    assert stream.getvalue().isascii()
    assert lines_of(stream)[0]["message"] == "payout to Zoë Müller"


def test_an_extra_cannot_overwrite_a_stable_key(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.info("x", extra={"event": "e", "level": "fake", "ts": "fake", "logger": "fake"})
    [line] = lines_of(stream)
    assert line["level"] == "info" and line["ts"] != "fake" and line["logger"] == "paycore.test.logs"


def test_an_exception_is_its_type_and_traceback_text(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed", extra={"event": "job_failed", "job": "resolve_payments"})
    [line] = lines_of(stream)
    assert line["exc_type"] == "ValueError"
    assert isinstance(line["exc"], str) and "ValueError: boom" in line["exc"] and "Traceback" in line["exc"]
    assert line["level"] == "error" and line["job"] == "resolve_payments"


def test_the_text_format_is_for_people() -> None:
    record = logging.LogRecord("paycore.x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    record.event = "greeting"
    record.tenant_id = "acme"
    text = logs.TextFormatter().format(record)
    assert "INFO" in text and "paycore.x greeting: hello you" in text and "tenant_id=acme" in text
    assert not text.startswith("{")


def test_configure_installs_one_handler_and_replaces_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    level = root.level
    try:
        logs.configure("json", "INFO")
        logs.configure("json", "INFO")
        ours = [handler for handler in root.handlers if handler not in before]
        assert len(ours) == 1
        assert logging.getLogger("uvicorn.error").handlers == []
        assert logging.getLogger("uvicorn.error").propagate
        assert not logs.configure_unless_configured()  # a handler exists: left alone
        logging.getLogger("paycore.test.configure").info("to stderr", extra={"event": "configured"})
        err = capsys.readouterr().err
        assert json.loads(err.strip().splitlines()[-1])["event"] == "configured"
    finally:
        for handler in list(root.handlers):
            if handler not in before:
                root.removeHandler(handler)
        root.setLevel(level)


def test_log_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PAYCORE_LOG_FORMAT", raising=False)
    monkeypatch.delenv("PAYCORE_LOG_LEVEL", raising=False)
    assert log_options_from_env() == ("json", "INFO")
    monkeypatch.setenv("PAYCORE_LOG_FORMAT", "TEXT")
    monkeypatch.setenv("PAYCORE_LOG_LEVEL", "debug")
    assert log_options_from_env() == ("text", "DEBUG")
    assert (Settings.from_env().log_format, Settings.from_env().log_level) == ("text", "DEBUG")
    monkeypatch.setenv("PAYCORE_LOG_FORMAT", "xml")
    with pytest.raises(SystemExit, match="PAYCORE_LOG_FORMAT"):
        Settings.from_env()
    monkeypatch.setenv("PAYCORE_LOG_FORMAT", "json")
    monkeypatch.setenv("PAYCORE_LOG_LEVEL", "loud")
    with pytest.raises(SystemExit, match="PAYCORE_LOG_LEVEL"):
        log_options_from_env()


def test_a_url_in_a_start_line_carries_no_credentials() -> None:
    from paycore.cli.main import _shown

    assert _shown("https://user:s3cret@processor.internal:8443/api") == "https://processor.internal:8443/api"
    assert _shown("http://127.0.0.1:8100") == "http://127.0.0.1:8100"


def test_a_closed_stand_in_for_stderr_does_not_break_later_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """A CLI run in process swaps standard error, configures logging and closes its stand-in:
    a later line (another thread's, another test's) goes to the standard error of its time."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    stand_in = io.StringIO()
    real = sys.stderr
    try:
        sys.stderr = stand_in
        logs.configure("json", "INFO")
        sys.stderr = real
        stand_in.close()
        logging.getLogger("paycore.test.closed").info("after", extra={"event": "after_close"})
        err = capsys.readouterr().err
        assert "Logging error" not in err
        assert json.loads(err.strip().splitlines()[-1])["event"] == "after_close"
    finally:
        sys.stderr = real
        for handler in list(root.handlers):
            if handler not in before:
                root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def configured_alone(tmp_path: Path) -> Iterator[tuple[logging.Logger, logging.Handler, Path]]:
    """`configure`'s JSON handler (to a file), as the only handler of a logger of its own."""
    root = logging.getLogger()
    level = root.level
    path = tmp_path / "lines.log"
    handler = logs.configure("json", "INFO", path=str(path))
    root.removeHandler(handler)
    root.setLevel(level)
    logger = logging.getLogger("paycore.test.direct")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, handler, path
    logger.removeHandler(handler)
    logger.propagate = True
    handler.close()


def _only(logger: logging.Logger, handler: logging.Handler) -> list[logging.Handler]:
    """Take off the logger the handlers other than `handler` (pytest's capture puts its own on
    it for the test's call); they are returned, to be put back."""
    others = [other for other in logger.handlers if other is not handler]
    for other in others:
        logger.removeHandler(other)
    return others


def test_a_direct_line_is_the_line_the_record_makes(
    configured_alone: tuple[logging.Logger, logging.Handler, Path],
) -> None:
    logger, handler, path = configured_alone
    others = _only(logger, handler)
    extra = {"event": "http_request", "request_id": "req_1", "tenant_id": None, "status": 201, "odd": Decimal("1.5")}
    token = logs.set_request_id("req_context")
    try:
        assert logs.write_direct(logger, "POST /v1/payments 201", extra)
        logger.info("%s %s %d", "POST", "/v1/payments", 201, extra=extra)
        assert logs.write_direct(logger, "no id", {"event": ""})
        logger.info("no id", extra={"event": ""})
    finally:
        logs.reset_request_id(token)
        for other in others:
            logger.addHandler(other)
    lines = path.read_text().splitlines()
    direct, standard, bare_direct, bare_standard = (json.loads(line) for line in lines)
    for line in (direct, bare_direct):
        assert RFC3339_UTC.fullmatch(str(line["ts"]))
    for one, other in ((direct, standard), (bare_direct, bare_standard)):
        assert list(one) == list(other)  # the same keys in the same order
        assert {**one, "ts": None} == {**other, "ts": None}
    assert bare_direct["request_id"] == "req_context" and bare_direct["event"] == "log"


def test_no_direct_line_when_the_standard_call_would_do_more(
    configured_alone: tuple[logging.Logger, logging.Handler, Path],
) -> None:
    logger, handler, path = configured_alone
    others = _only(logger, handler)
    other = logging.StreamHandler(io.StringIO())
    logger.addHandler(other)  # a second handler (a test's capture)
    assert not logs.write_direct(logger, "m", {"event": "e"})
    logger.removeHandler(other)
    logger.addFilter(lambda record: False)
    assert not logs.write_direct(logger, "m", {"event": "e"})
    logger.filters.clear()
    handler.setFormatter(logs.TextFormatter())
    assert not logs.write_direct(logger, "m", {"event": "e"})
    handler.setFormatter(logs.JsonFormatter())
    handler.setLevel(logging.WARNING)
    assert not logs.write_direct(logger, "m", {"event": "e"})
    assert path.read_text() == ""
    for kept in others:
        logger.addHandler(kept)
