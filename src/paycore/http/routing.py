"""What a path is served with, for the `Allow` header of a 405 (RFC 9110 §15.5.6). Shared by
paycore's API and the sandbox's."""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Match

_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """The methods the request's path is served with. Each is tried against the app's routes
    as the router matches them: FastAPI keeps one route per method, so the router's own
    `Allow` names only the first route whose path matched."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)
    ]
