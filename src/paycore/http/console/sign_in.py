"""Signing in and out of the console: `GET/POST /ops/login`, `POST /ops/logout`."""

from __future__ import annotations

import urllib.parse
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from paycore.http.console import session
from paycore.http.console.render import bare
from paycore.http.console.session import OpsState
from paycore.http.routing import JsonRoute
from paycore.kit.clock import now_us
from paycore.operators import service as operators
from paycore.operators.service import SignedIn
from paycore.operators.types import Principal

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
NAME_SHOWN_CHARS_MAX = 64  # of the name typed, shown again in the form (a name has at most 40)


def quote(target: str) -> str:
    return urllib.parse.quote(target, safe="")


def _safe_next(raw: str | None) -> str:
    """Only a console path of this server (never `//elsewhere`, never another scheme)."""
    if raw and raw.startswith("/ops") and not raw.startswith("//") and "\\" not in raw:
        return raw
    return "/ops"


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    state: OpsState = request.app.state.ops
    if not state.auth.is_auth_required():
        return RedirectResponse("/ops", status_code=303)  # local mode: nobody signs in
    return bare("login.html", next=_safe_next(next), name="", message=None)


@router.post("/login")
async def login(request: Request) -> Response:
    """Exchange the operator name of field `name` and the token of field `token` for a session.
    Failed sign-ins block the name at the address, or the address, for a while (429), across
    every API process (`operators.service.sign_in`)."""
    state: OpsState = request.app.state.ops
    fields = await session.read_form(request)
    target = _safe_next(fields.get("next"))
    name = fields.get("name", "").strip()[:NAME_SHOWN_CHARS_MAX]
    token = fields.get("token", "").strip()
    address = session.client_address(request)
    result = await _sign_in(state, name, token, address)
    if isinstance(result, SignedIn):
        redirect = RedirectResponse(target, status_code=303)
        session.set_session_cookie(request, redirect, result.cookie)
        return redirect
    if result.reason == "throttled":
        whom = "from this address" if result.blocked == "address" else "for this name from this address"
        message = f"Too many failed sign-ins {whom}: try again in {result.retry_after_s} s."
        response = bare("login.html", 429, next=target, name=name, message=message)
        response.headers["Retry-After"] = str(result.retry_after_s)
        return response
    message = "That is not a valid operator token for that name."
    return bare("login.html", 401, next=target, name=name, message=message)


async def _sign_in(
    state: OpsState, name: str, token: str, address: str
) -> operators.SignedIn | operators.SignInRefused:
    return await run_in_threadpool(
        state.database.transaction,
        lambda connection: operators.sign_in(connection, name, token, address, state.limits, now_us=now_us()),
    )


@router.post("/logout")
async def logout(request: Request, who: Annotated[Principal, Depends(session.principal)]) -> Response:
    await session.form(request)
    state: OpsState = request.app.state.ops
    await run_in_threadpool(
        state.database.transaction, lambda connection: operators.sign_out(connection, who, now_us=now_us())
    )
    response = RedirectResponse("/ops/login", status_code=303)
    session.clear_session_cookie(request, response)
    return response
