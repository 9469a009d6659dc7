"""The OpenAPI document's reading pages, `/docs` (Swagger UI) and `/redoc` (ReDoc), served with
their scripts and styles from this server: FastAPI's own pages load them from a CDN
and show blank offline. The files come from the `fastapi-offline` package, a maintained bundle
of both, pinned in pyproject.toml; only its four files are served, by name."""

from __future__ import annotations

from importlib import resources
from typing import Final

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

from paycore.http.errors import error_body, json_response
from paycore.http.routing import JsonRoute

router = APIRouter(include_in_schema=False, route_class=JsonRoute)
ASSETS: Final = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
_PREFIX: Final = "/docs/static/"


@router.get("/docs")
def swagger(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="paycore API",
        swagger_js_url=_PREFIX + "swagger-ui-bundle.js",
        swagger_css_url=_PREFIX + "swagger-ui.css",
        swagger_favicon_url=_PREFIX + "favicon.png",
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url="/openapi.json",
        title="paycore API",
        redoc_js_url=_PREFIX + "redoc.standalone.js",
        redoc_favicon_url=_PREFIX + "favicon.png",
        with_google_fonts=False,
    )


@router.get("/docs/static/{name}")
def asset(name: str) -> Response:
    if name not in ASSETS:
        return json_response(404, error_body("not_found", "no such file"))
    path = resources.files("fastapi_offline") / "static" / name
    return FileResponse(str(path), media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=86400"})
