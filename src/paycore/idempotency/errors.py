from __future__ import annotations

from paycore.kit.errors import Conflict, InvalidRequest


class IdempotencyKeyRequired(InvalidRequest):
    code = "idempotency_key_required"


class InvalidIdempotencyKey(InvalidRequest):
    code = "invalid_idempotency_key"


class IdempotencyKeyReused(Conflict):
    code = "idempotency_key_reused"


class IdempotencyRequestInProgress(Conflict):
    code = "idempotency_request_in_progress"
