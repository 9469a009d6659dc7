"""The audit log's rows, built (pure): the one home of an event's encoding. `service` writes
them in the caller's transaction; a data-plane phase plans them beside its other rows and its
repository writes them in its one round trip (ADR 0026)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from paycore.kit import actors, logs

# Bounded so that one huge processor answer cannot bloat the log.
DATA_BYTES_MAX = 16_384
# `json.dumps(value, sort_keys=True, separators=(",", ":"))` without making its encoder for each
# call (a payment's phases encode five events' data and two snapshots); `encode` keeps no state.
_ENCODER: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class EventContext:
    """Who caused an event, beside its actor: the request (or worker job run) and the worker
    process, as the log context names them when the event is made."""

    request_id: str | None
    worker_id: str | None

    @staticmethod
    def current() -> EventContext:
        return EventContext(logs.request_id(), logs.worker_id())


def state_change_row(
    tenant_id: str,
    *,
    event_id: str,
    context: EventContext,
    object_type: str,
    object_id: str,
    from_state: str | None,
    to_state: str,
    cause: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None = None,
    snapshot: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The row `record_state_change` writes, built (pure: a data-plane phase plans it, ADR 0026)."""
    # Numbered 1 at birth; else by the INSERT itself (repository.add_next).
    sequence = None if snapshot is None or from_state is not None else 1
    return event_row(
        tenant_id,
        event_id=event_id,
        context=context,
        kind="state_change",
        type=f"{object_type}.{to_state}",
        object_type=object_type,
        object_id=object_id,
        from_state=from_state,
        to_state=to_state,
        cause=cause,
        actor=actor,
        now_us=now_us,
        data=data or {},
        snapshot=snapshot,
        sequence=sequence,
    )


def processor_call_row(
    tenant_id: str,
    *,
    event_id: str,
    context: EventContext,
    object_type: str,
    object_id: str,
    operation: str,
    request: dict[str, Any],
    outcome: dict[str, Any],
    latency_ms: int,
    actor: str,
    now_us: int,
    attempt: int | None = None,
) -> dict[str, Any]:
    """The row `record_processor_call` writes, built (pure: a data-plane phase plans it, ADR 0026)."""
    data: dict[str, Any] = {"request": request, "response": outcome, "latency_ms": latency_ms}
    if attempt is not None:
        data["attempt"] = attempt
    return event_row(
        tenant_id,
        event_id=event_id,
        context=context,
        kind="processor_call",
        type=f"processor.{operation}",
        object_type=object_type,
        object_id=object_id,
        from_state=None,
        to_state=None,
        cause=str(outcome.get("outcome", "answered")),
        actor=actor,
        now_us=now_us,
        data=data,
    )


def webhook_row(
    tenant_id: str,
    *,
    event_id: str,
    context: EventContext,
    object_type: str,
    object_id: str,
    event_type: str,
    result: str,
    payload: dict[str, Any],
    now_us: int,
) -> dict[str, Any]:
    """The row `record_webhook` writes, built (pure: a data-plane phase plans it, ADR 0026)."""
    return event_row(
        tenant_id,
        event_id=event_id,
        context=context,
        kind="webhook",
        type=f"webhook.{event_type}",
        object_type=object_type,
        object_id=object_id,
        from_state=None,
        to_state=None,
        cause=result,
        actor=actors.PROCESSOR,
        now_us=now_us,
        data=payload,
    )


def api_call_row(
    tenant_id: str,
    *,
    event_id: str,
    context: EventContext,
    object_type: str,
    object_id: str,
    operation: str,
    status: int,
    outcome: str,
    actor: str,
    now_us: int,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The row `record_api_call` writes, built (pure: a data-plane phase plans it, ADR 0026)."""
    return event_row(
        tenant_id,
        event_id=event_id,
        context=context,
        kind="api_call",
        type=f"api.{operation}",
        object_type=object_type,
        object_id=object_id,
        from_state=None,
        to_state=None,
        cause=outcome,
        actor=actor,
        now_us=now_us,
        data={"status": status, **(data or {})},
    )


def event_row(
    tenant_id: str,
    *,
    event_id: str,
    context: EventContext,
    data: dict[str, Any],
    now_us: int,
    snapshot: dict[str, Any] | None = None,
    sequence: int | None = None,
    **values: Any,
) -> dict[str, Any]:
    """An event's row as `write` inserts it: the one home of its encoding. Pure."""
    assert actors.is_actor(values["actor"]), f"not an actor of paycore.kit.actors: {values['actor']!r}"
    if context.request_id is not None and "request_id" not in data:  # the request (or job run)
        data = {**data, "request_id": context.request_id}
    if context.worker_id is not None and "worker_id" not in data:  # which worker process
        data = {**data, "worker_id": context.worker_id}
    encoded = _ENCODER.encode(data)
    if len(encoded) > DATA_BYTES_MAX:
        encoded = json.dumps({"truncated": True, "prefix": encoded[: DATA_BYTES_MAX // 2]})
    row = {"tenant_id": tenant_id, "id": event_id, "data": encoded, "created_at_us": now_us, **values}
    if snapshot is not None:
        row["snapshot"] = _ENCODER.encode(snapshot)
        if sequence is not None:
            row["object_sequence"] = sequence
    return row
