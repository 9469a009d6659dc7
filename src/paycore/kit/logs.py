"""Structured logs (SPEC §12): one JSON object per line on standard error, and the request id
that ties a request's lines, audit events and processor calls together.

Code logs with the standard library and puts its fields in `extra=`, with an `event` name:

    log.warning("no answer from the processor", extra={"event": "processor_no_answer", "operation": "charge"})

`JsonFormatter` writes the stable keys first (`ts`, `level`, `logger`, `event`, `message`,
`request_id`), then every `extra=` field as a top-level key, then `exc_type` and `exc` for an
exception. A value JSON cannot hold is written as its `str`. `TextFormatter` is the same
record for a person reading a terminal (`PAYCORE_LOG_FORMAT=text`).

Standard library only (this is `kit/`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar, Token
from typing import Any, Final

FORMATS: Final = ("json", "text")
LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
REQUEST_ID_HEADER: Final = "X-Request-Id"
# uvicorn's loggers: routed through our handler (uvicorn's access log stays off: we write our own).
UVICORN_LOGGERS: Final = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")

_request_id: ContextVar[str | None] = ContextVar("paycore_request_id", default=None)
_worker_id: ContextVar[str | None] = ContextVar("paycore_worker_id", default=None)

# The attributes every LogRecord has: anything else on a record came from `extra=`.
_RECORD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys() | {"message", "asctime", "taskName"}
)
_OURS: Final = "paycore_handler"
_STABLE_KEYS: Final = ("ts", "level", "logger", "event", "message", "request_id")
# `json.dumps(value, default=str, separators=(",", ":"))` without making its encoder for each
# line (the access line is on the path of every request); `encode` keeps no state between calls.
_ENCODER: Final = json.JSONEncoder(default=str, separators=(",", ":"))


def request_id() -> str | None:
    """The id of the request (or worker round) this code runs for, if any."""
    return _request_id.get()


def set_request_id(value: str | None) -> Token[str | None]:
    """Set the current request id; pass the token to `reset_request_id` when the request ends."""
    return _request_id.set(value)


def reset_request_id(token: Token[str | None]) -> None:
    _request_id.reset(token)


def worker_id() -> str | None:
    """The worker process and thread this code runs in (`host:pid:random`), if a worker's."""
    return _worker_id.get()


def set_worker_id(value: str | None) -> Token[str | None]:
    return _worker_id.set(value)


def reset_worker_id(token: Token[str | None]) -> None:
    _worker_id.reset(token)


_second_cache: tuple[int, str] = (-1, "")


def _timestamp(created: float) -> str:
    """RFC 3339 UTC with milliseconds: 2026-12-03T07:49:35.123Z. The part up to the second is
    formatted once per second (strftime was most of a line's cost; the access line is on the
    path of every request)."""
    global _second_cache
    seconds = int(created)
    cached_second, prefix = _second_cache
    if cached_second != seconds:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second_cache = (seconds, prefix)  # one tuple, swapped whole: safe across threads
    return f"{prefix}.{int((created - seconds) * 1000):03d}Z"


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key, value in vars(record).items() if key not in _RECORD_ATTRIBUTES}


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record as the flat mapping both formatters write: stable keys first."""
    line = _line(record.created, record.levelname, record.name, record.getMessage(), _extras(record))
    if record.exc_info and record.exc_info[0] is not None:
        line["exc_type"] = record.exc_info[0].__name__
        line["exc"] = logging.Formatter().formatException(record.exc_info)
    elif record.exc_text:
        line["exc"] = record.exc_text
    if record.stack_info:
        line["stack"] = record.stack_info
    return line


def _line(created: float, level_name: str, logger_name: str, message: str, extras: dict[str, Any]) -> dict[str, Any]:
    """A line's stable keys, then its extras (never overwriting a stable key): the one shape of
    `fields` and of `write_direct`."""
    line: dict[str, Any] = {
        "ts": _timestamp(created),
        "level": level_name.lower(),
        "logger": logger_name,
        "event": extras.get("event") or "log",
        "message": message,
    }
    found = extras.get("request_id") or _request_id.get()
    if found is not None:
        line["request_id"] = found
    for key, value in extras.items():
        if key not in _STABLE_KEYS:  # an extra never overwrites a stable key
            line[key] = value
    return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line, never more than one line (newlines inside values are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        # ASCII only (\u escapes): a line can be written whatever the encoding of standard error.
        return _ENCODER.encode(fields(record))


class TextFormatter(logging.Formatter):
    """`ts level logger event: message key=value ...` for development."""

    def format(self, record: logging.LogRecord) -> str:
        line = fields(record)
        head = f"{line.pop('ts')} {line.pop('level').upper():<7} {line.pop('logger')} {line.pop('event')}:"
        message = line.pop("message")
        exception = line.pop("exc", None)
        line.pop("exc_type", None)
        pairs = " ".join(f"{key}={_text(value)}" for key, value in line.items())
        text = f"{head} {message}" + (f" [{pairs}]" if pairs else "")
        return text + ("\n" + exception if exception else "")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return _ENCODER.encode(value)
    except ValueError:  # a circular container
        return str(value)


def formatter(format: str) -> logging.Formatter:
    assert format in FORMATS, format
    return JsonFormatter() if format == "json" else TextFormatter()


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler that writes to whatever `sys.stderr` is when a line is written, not what it was
    when the handler was made: a caller that swaps standard error for a while (a test runner's
    capture, a CLI runner) and closes its stand-in leaves later lines, from any thread, going to
    the real one instead of failing on a closed file."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:  # setStream and StreamHandler.__init__: always sys.stderr
        pass


def configure(format: str = "json", level: str = "INFO", *, path: str | None = None) -> logging.Handler:
    """Send every log line of this process to standard error (or, with `path`, appended to that
    file) in `format`: one handler on the root logger (replacing the one an earlier call
    installed), uvicorn's loggers routed through it. Handlers installed by others (a test
    harness) are left alone."""
    assert level in LEVELS, level
    handler: logging.Handler
    handler = StderrHandler() if path is None else logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(formatter(format))
    setattr(handler, _OURS, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _OURS, False):
            root.removeHandler(old)
            old.close()  # a file's handler closes its file; standard error's is left open
    root.addHandler(handler)
    root.setLevel(level)
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    logging.getLogger("uvicorn.access").disabled = True
    return handler


def configure_unless_configured(format: str = "json", level: str = "INFO") -> bool:
    """`configure`, only if the root logger has no handler yet: an application that embeds
    paycore keeps its own logging. True if this call configured it."""
    if logging.getLogger().handlers:
        return False
    configure(format, level)
    return True


def write_direct(logger: logging.Logger, message: str, extra: dict[str, Any]) -> bool:
    """Write an INFO line as `logger.info(message, extra=extra)` would, without a LogRecord,
    when that call would end in one write of `configure`'s JSON handler and nothing else: no
    filter, no other handler on the way (a test's capture, an embedding application's), the
    line exactly what `JsonFormatter` makes of the record. False, with nothing written,
    otherwise: the caller logs it the standard way. For a line on the path of every request
    (the access line): the record, the handler's chain and the formatter's general case are
    most of its cost. The caller has checked `logger.isEnabledFor(logging.INFO)`."""
    handler = _only_json_handler(logger)
    if handler is None:
        return False
    line = _line(time.time(), logging.getLevelName(logging.INFO), logger.name, message, extra)
    text = _ENCODER.encode(line) + handler.terminator
    with handler.lock:  # type: ignore[union-attr]  # made by every Handler's __init__
        try:
            handler.stream.write(text)
            handler.flush()
        except Exception:  # as `StreamHandler.emit`: reported, never raised to the caller
            handler.handleError(logger.makeRecord(logger.name, logging.INFO, "", 0, message, (), None, extra=extra))
    return True


def _only_json_handler(logger: logging.Logger) -> logging.StreamHandler | None:  # type: ignore[type-arg]
    """`configure`'s handler when it is the only one `logger.handle` would call for an INFO
    line, with no filter on the way; else None."""
    if logger.filters:  # `Logger.handle` runs the logger's own filters, not its parents'
        return None
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:  # `Logger.callHandlers`' walk
        found.extend(current.handlers)
        if not current.propagate:
            break
        current = current.parent
    if len(found) != 1:
        return None
    handler = found[0]
    if (
        type(handler) not in (StderrHandler, logging.FileHandler)
        or not getattr(handler, _OURS, False)
        or type(handler.formatter) is not JsonFormatter
        or handler.filters
        or handler.level > logging.INFO
        or handler.stream is None  # type: ignore[attr-defined]
    ):
        return None
    return handler  # type: ignore[return-value]
