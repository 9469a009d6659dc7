"""The state machines of outgoing webhooks, as data (ADR 0015).

A delivery (one event to one endpoint):

    pending -> delivered   (an attempt answered 2xx)
    pending -> failed      (the retry window ran out: the tenant can redeliver by hand)
    pending -> canceled    (its endpoint was deleted)

A retry is not a transition: a failed attempt leaves the delivery `pending` with its next
attempt scheduled. Every attempt is a `webhook_attempts` row; the move to `delivered` or
`failed` is made by the attempt's transaction, so the attempt is that move's record.

An endpoint:

    enabled <-> disabled   (the tenant, or paycore after the endpoint failed for
                            PAYCORE_WEBHOOK_DISABLE_AFTER_MS: `disabled_reason` says why)
    enabled | disabled -> deleted
"""

from __future__ import annotations

from typing import Final

PENDING: Final = "pending"
DELIVERED: Final = "delivered"
FAILED: Final = "failed"
CANCELED: Final = "canceled"
DELIVERY_STATUSES: Final = (PENDING, DELIVERED, FAILED, CANCELED)
DELIVERY_TRANSITIONS: Final = frozenset({(PENDING, DELIVERED), (PENDING, FAILED), (PENDING, CANCELED)})

ENABLED: Final = "enabled"
DISABLED: Final = "disabled"
DELETED: Final = "deleted"
ENDPOINT_STATUSES: Final = (ENABLED, DISABLED, DELETED)
ENDPOINT_TRANSITIONS: Final = frozenset(
    {(ENABLED, DISABLED), (DISABLED, ENABLED), (ENABLED, DELETED), (DISABLED, DELETED)}
)


def delivery_allowed(from_status: str, to_status: str) -> bool:
    return (from_status, to_status) in DELIVERY_TRANSITIONS


def endpoint_allowed(from_status: str, to_status: str) -> bool:
    return (from_status, to_status) in ENDPOINT_TRANSITIONS
