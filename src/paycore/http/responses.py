"""OpenAPI descriptions of the error responses every route may give."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from paycore.schemas import ErrorBody

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Invalid request (stable error code in `error`)"},
    401: {"model": ErrorBody, "description": "Missing or invalid API key"},
    403: {"model": ErrorBody, "description": "The API key belongs to another tenant"},
    404: {"model": ErrorBody, "description": "Not found"},
    409: {"model": ErrorBody, "description": "Conflict (e.g. idempotency_key_reused)"},
    413: {"model": ErrorBody, "description": "Request body too large"},
    415: {"model": ErrorBody, "description": "Request body is not JSON"},
    422: {"model": ErrorBody, "description": "Business refusal (e.g. insufficient_funds)"},
    503: {"model": ErrorBody, "description": "Database busy; retry"},
}


def _idempotency_header(required: bool) -> dict[str, Any]:
    return {
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": required,
                "description": "1-255 printable ASCII characters, unique per tenant. The same key with the same "
                "request replays the first response (header Idempotent-Replayed: true); with another request it "
                "is 409 idempotency_key_reused." + (" Missing: 400 idempotency_key_required." if required else ""),
                "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
            }
        ]
    }


# The one cursor rule of every list (docs/api.md, "Pagination").
CURSOR_RULE = (
    "The id of the last object of the previous page: an object this list holds (for the loss "
    "report, a payout it lists with the same filters). Empty, unknown, another tenant's or "
    "another list's: 400 invalid_starting_after."
)
StartingAfter = Annotated[str | None, Query(min_length=1, max_length=64, description=CURSOR_RULE)]


# For money-moving POSTs (SPEC §3.1), and for POSTs that only create something.
IDEMPOTENT = _idempotency_header(required=True)
OPTIONALLY_IDEMPOTENT = _idempotency_header(required=False)
