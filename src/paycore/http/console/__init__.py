"""The operations console (SPEC §12; docs/operations-console.md): server-rendered
HTML under `/ops`, for the people of `paycore operators`. No build step, no script, no asset
from outside. Pages read through the domains' services; every action is a POST form with a
CSRF token, checked against the signed-in operator's role (`operators.types.LEAST_ROLE`)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from paycore.config import Settings
from paycore.http.console import actions, capture, disputes, losses, pages, queues, reports, search, settings, sign_in
from paycore.http.console.render import bare
from paycore.http.console.session import CsrfRefused, FormRefused, OpsState, SignInRequired
from paycore.http.routing import add_routes
from paycore.operators.service import SessionLimits

ROUTERS = tuple(
    module.router for module in (sign_in, pages, queues, disputes, losses, reports, search, settings, actions, capture)
)


def install(app: FastAPI, settings: Settings) -> None:
    app.state.ops = OpsState(
        database=app.state.database,
        auth=app.state.auth,
        limits=SessionLimits(
            idle_ms=settings.ops_session_idle_ms,
            max_ms=settings.ops_session_max_ms,
            failures_max=settings.ops_sign_in_failures_max,
            window_ms=settings.ops_sign_in_window_ms,
            address_failures_max=settings.ops_sign_in_address_failures_max,
        ),
    )

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, _error: SignInRequired) -> Response:
        if request.method in ("GET", "HEAD"):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/ops/login?next={sign_in.quote(target)}", status_code=303)
        return bare(
            "refused.html",
            401,
            heading="Sign in first",
            message="This action needs a signed-in operator.",
            back="/ops/login",
        )

    @app.exception_handler(CsrfRefused)
    async def _csrf(_request: Request, _error: CsrfRefused) -> Response:
        message = (
            "The form did not carry this session's CSRF token: nothing was changed. Reload the page and try again."
        )
        return bare("refused.html", 403, heading="Refused", message=message, back="/ops")

    @app.exception_handler(FormRefused)
    async def _form(_request: Request, error: FormRefused) -> Response:
        return bare("refused.html", 400, heading="Refused", message=str(error), back="/ops")

    add_routes(app, *ROUTERS)
