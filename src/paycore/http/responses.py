"""OpenAPI descriptions of the error responses every route may give."""

from __future__ import annotations

from typing import Any

from paycore.kit.schemas import ErrorBody

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
