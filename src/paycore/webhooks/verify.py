"""Check a webhook paycore sent you: the recipe of docs/webhooks.md as a function.

    from paycore.webhooks.verify import verify_event, WebhookSignatureError

    def receive(raw_body: bytes, headers) -> None:
        try:
            event = verify_event(raw_body, headers.get("Paycore-Signature"), ENDPOINT_SECRET)
        except WebhookSignatureError:
            return 400  # not from paycore, altered, or replayed after the tolerance
        if already_seen(headers["Paycore-Delivery-Id"]) ...   # at least once: dedupe
        ...order the object's events by event["sequence"]

Verify the raw bytes as received, before any JSON parsing: the signature is over them.
During a secret rotation's overlap the header carries one `v1=` per secret; one matching
yours is enough. This module needs the standard library only.
"""

from __future__ import annotations

import json
import time
from typing import Any

from paycore.kit.signing import TOLERANCE_S, SignatureError, verify

WebhookSignatureError = SignatureError

__all__ = ["TOLERANCE_S", "WebhookSignatureError", "verify_event"]


def verify_event(
    body: bytes, header: str | None, secret: str, *, tolerance_s: int = TOLERANCE_S, now_s: int | None = None
) -> dict[str, Any]:
    """The event, if `header` (the `Paycore-Signature` value) signs `body` with `secret` at a
    time within `tolerance_s` of now; else `WebhookSignatureError` (its `code` says which:
    signature_missing, signature_invalid, signature_timestamp_out_of_tolerance)."""
    verify(secret, header, body, now_s=int(time.time()) if now_s is None else now_s, tolerance_s=tolerance_s)
    event: dict[str, Any] = json.loads(body)
    return event
