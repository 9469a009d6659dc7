"""One timed call to the processor, turned into what it established. Shared by every domain
that calls the processor (payments, refunds): each wraps the `Answer` in its own evidence."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from paycore.processor.port import ProcessorRefused, ProcessorUnreachable

log = logging.getLogger(__name__)
MESSAGE_LENGTH_MAX = 500
R = TypeVar("R")
AnswerKind = Literal["result", "refused", "unreachable", "not_found"]


@dataclass(frozen=True)
class Answer(Generic[R]):
    """`unreachable` and `not_found` prove nothing about the money; `outcome` is for the audit log."""

    kind: AnswerKind
    result: R | None
    refusal_code: str | None
    outcome: dict[str, Any]
    latency_ms: int


def timed(operation: str, call: Callable[[], R | None], *, ids: Mapping[str, str] | None = None) -> Answer[R]:
    """Make `call` and classify what came back. A call with no answer (`unreachable`) is also
    a `processor_no_answer` log line with `ids` (e.g. payment_id, tenant_id): never the
    request itself, which may hold a card token or an account number."""
    started = time.monotonic_ns()
    result: R | None = None
    refusal_code: str | None = None
    try:
        result = call()
    except ProcessorRefused as error:
        kind: AnswerKind = "refused"
        refusal_code = error.code
        outcome: dict[str, Any] = {"outcome": "refused", "error": error.code, "message": str(error)}
    except Exception as error:  # ProcessorUnreachable, or a transport failure: proves nothing either way
        if not isinstance(error, ProcessorUnreachable):
            log.exception(
                "processor %s failed unexpectedly",
                operation,
                extra={"event": "processor_call_failed", "operation": operation, **(ids or {})},
            )
        kind = "unreachable"
        outcome = {"outcome": "unreachable", "error": type(error).__name__, "message": str(error)[:MESSAGE_LENGTH_MAX]}
    else:
        if result is None:
            kind, outcome = "not_found", {"outcome": "not_found"}
        else:
            assert dataclasses.is_dataclass(result) and not isinstance(result, type)
            kind, outcome = "result", {"outcome": "answered", **dataclasses.asdict(result)}
    latency_ms = (time.monotonic_ns() - started) // 1_000_000
    if kind == "unreachable":
        _no_answer(operation, str(outcome["error"]), latency_ms, ids)
    return Answer(kind, result, refusal_code, outcome, latency_ms)


def _no_answer(operation: str, error_type: str, latency_ms: int, ids: Mapping[str, str] | None) -> None:
    # The error's type only: its message may quote whatever the processor or bank sent back.
    log.warning(
        "no answer from the processor to %s (%s after %d ms)",
        operation,
        error_type,
        latency_ms,
        extra={
            "event": "processor_no_answer",
            "operation": operation,
            "error_type": error_type,
            "latency_ms": latency_ms,
            **(ids or {}),
        },
    )
