"""The sandbox's admin token: who may change what the processor answers.

Three endpoints change the sandbox rather than ask it something: `PUT /v1/sandbox/faults` and
`DELETE /v1/sandbox/faults` set and clear the fault plan, which decides what every later call
is answered (a dropped answer, a late settlement) and what the settlement report says of it
(the `report_*` faults: the report is written from them); `POST /v1/sandbox/webhooks/deliver`
settles and delivers on demand. With a token they need `Authorization: Bearer <token>` (401
`unauthorized` otherwise, the token compared in constant time). Without one they are open:
`paycore processor serve` binds only loopback then (paycore.http.exposure.check_admin_bind),
where tests and `paycore serve --dev` use them. Reading (`GET /v1/sandbox/faults`, the
settlement report, charges, batches) needs no token: it changes nothing.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Depends, Request

from paycore_sandbox.limits import ADMIN_TOKEN_ENV, admin_token_problem

__all__ = ["ADMIN_TOKEN_ENV", "AdminTokenRequired", "admin_dependencies", "admin_token_problem"]


class AdminTokenRequired(Exception):
    """The request lacks the admin token, or carries another: answered 401, nothing changes."""


def admin_dependencies(admin_token: str | None) -> list[Any]:
    """The dependencies of the endpoints that change the sandbox: none without a token."""
    if admin_token is None:
        return []
    assert admin_token_problem(admin_token) is None, admin_token_problem(admin_token)
    expected = f"Bearer {admin_token}".encode("ascii")

    def require_admin_token(request: Request) -> None:
        given = request.headers.get("authorization", "").encode("latin-1")  # as Starlette decoded it
        if not hmac.compare_digest(given, expected):
            raise AdminTokenRequired

    return [Depends(require_admin_token)]
