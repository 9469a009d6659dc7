"""`/docs` and `/redoc` work offline (issue 28): every script, style and icon they load comes
from this server."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from paycore.http.docs import ASSETS


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_reference_pages_load_nothing_from_elsewhere(client: TestClient, page: str) -> None:
    html = client.get(page)
    assert html.status_code == 200
    loaded = re.findall(r'(?:src|href)=["\']([^"\']+)["\']', html.text) + re.findall(r"url: ?'([^']+)'", html.text)
    assert loaded, html.text
    for url in loaded:
        assert url.startswith("/"), (page, url)  # never http(s)://a CDN
        assert client.get(url).status_code == 200, url
    assert "fonts.googleapis" not in html.text


def test_only_the_bundled_files_are_served(client: TestClient) -> None:
    for name, media_type in ASSETS.items():
        response = client.get(f"/docs/static/{name}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(media_type), name
    for name in ("core.py", "..%2F..%2Fpyproject.toml", "swagger-ui-bundle.js.map"):
        assert client.get(f"/docs/static/{name}").status_code == 404, name
