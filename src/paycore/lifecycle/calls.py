"""One timed call to another system (the processor, the bank, a tenant's endpoint), with no
database transaction open, turned into evidence; and its attempt, recorded in the audit log
in the next transaction.

A call either answers (a result, or None: "no record of this request"), refuses (`Refused`:
the other system says it did nothing) or gives no usable answer (anything else: timeout,
dropped connection, 5xx), which proves nothing either way.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import Connection

from paycore.audit import rows as audit_rows
from paycore.audit import service as audit
from paycore.lifecycle.errors import Refused, Unreachable
from paycore.lifecycle.evidence import Evidence, EvidenceKind

log = logging.getLogger(__name__)
MESSAGE_LENGTH_MAX = 500
R = TypeVar("R")


@dataclass(frozen=True)
class Call(Generic[R]):
    """A call made: what was sent (as recorded: secrets masked), what it established, the
    answer or error as recorded, and how long it took."""

    operation: str
    request: dict[str, Any]
    evidence: Evidence[R]
    outcome: dict[str, Any]
    latency_ms: int

    @property
    def kind(self) -> EvidenceKind:
        return self.evidence.kind


def timed(
    operation: str,
    request: dict[str, Any],
    call: Callable[[], R | None],
    *,
    ids: Mapping[str, str] | None = None,
) -> Call[R]:
    """Make `call` and classify what came back. A call with no answer is also a
    `processor_no_answer` log line with `ids` (e.g. payment_id, tenant_id): never the
    request itself, which may hold a card token or an account number."""
    started = time.monotonic_ns()
    try:
        result = call()
    except Exception as error:
        return _classified(operation, request, started, ids, None, error)
    return _classified(operation, request, started, ids, result, None)


async def timed_on_loop(
    operation: str,
    request: dict[str, Any],
    call: Awaitable[R | None],
    *,
    ids: Mapping[str, str] | None = None,
) -> Call[R]:
    """`timed` for a call made from the event loop (awaited, no thread)."""
    started = time.monotonic_ns()
    try:
        result = await call
    except Exception as error:
        return _classified(operation, request, started, ids, None, error)
    return _classified(operation, request, started, ids, result, None)


def _classified(
    operation: str,
    request: dict[str, Any],
    started_ns: int,
    ids: Mapping[str, str] | None,
    result: R | None,
    error: Exception | None,
) -> Call[R]:
    """What came back (`result`, or the `error` raised), as evidence."""
    refusal_code: str | None = None
    if isinstance(error, Refused):
        kind: EvidenceKind = "refused"
        refusal_code = error.code
        outcome: dict[str, Any] = {"outcome": "refused", "error": error.code, "message": str(error)}
    elif error is not None:  # Unreachable, or a transport failure: proves nothing either way
        if not isinstance(error, Unreachable):
            log.error(
                "processor %s failed unexpectedly",
                operation,
                exc_info=error,
                extra={"event": "processor_call_failed", "operation": operation, **(ids or {})},
            )
        kind = "unreachable"
        outcome = {"outcome": "unreachable", "error": type(error).__name__, "message": str(error)[:MESSAGE_LENGTH_MAX]}
    elif result is None:
        kind, outcome = "not_found", {"outcome": "not_found"}
    else:
        assert dataclasses.is_dataclass(result) and not isinstance(result, type)
        kind, outcome = "result", {"outcome": "answered", **_as_dict(result)}
    latency_ms = (time.monotonic_ns() - started_ns) // 1_000_000
    if kind == "unreachable":
        _no_answer(operation, str(outcome["error"]), latency_ms, ids)
    evidence = Evidence(kind, result=result, refusal_code=refusal_code, operation=operation)
    return Call(operation, request, evidence, outcome, latency_ms)


# The values `dataclasses.asdict` gives back as they are (its deep copy of each is itself).
_ATOMS: Final = frozenset({str, int, float, bool, type(None)})


def _as_dict(result: Any) -> dict[str, Any]:
    """`dataclasses.asdict(result)`: a result of plain values (a charge's, a refund's, a
    payout's) read field by field, without the deep copy `asdict` makes of each value (a
    `copy.deepcopy` call a field, for a value that is its own copy); any other through
    `asdict` itself."""
    values = {field.name: getattr(result, field.name) for field in dataclasses.fields(result)}
    if all(type(value) in _ATOMS for value in values.values()):
        return values
    return dataclasses.asdict(result)


def record(
    connection: Connection,
    tenant_id: str,
    *,
    object_type: str,
    object_id: str,
    call: Call[Any],
    attempt: int | None,
    actor: str,
    now_us: int,
) -> None:
    """The call as an attempt on the item's audit log: request, answer or error, latency, and
    its round (`attempt`; None for the call a request makes before any worker round)."""
    audit.record_processor_call(
        connection,
        tenant_id,
        object_type=object_type,
        object_id=object_id,
        operation=call.operation,
        request=call.request,
        outcome=call.outcome,
        latency_ms=call.latency_ms,
        actor=actor,
        now_us=now_us,
        attempt=attempt,
    )


def event_row(
    tenant_id: str,
    *,
    object_type: str,
    object_id: str,
    call: Call[Any],
    attempt: int | None,
    actor: str,
    now_us: int,
    event_id: str,
    context: audit_rows.EventContext,
) -> dict[str, Any]:
    """The row `record` writes, built (pure): what a data-plane phase plans (ADR 0026)."""
    return audit_rows.processor_call_row(
        tenant_id,
        event_id=event_id,
        context=context,
        object_type=object_type,
        object_id=object_id,
        operation=call.operation,
        request=call.request,
        outcome=call.outcome,
        latency_ms=call.latency_ms,
        actor=actor,
        now_us=now_us,
        attempt=attempt,
    )


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
