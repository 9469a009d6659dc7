"""A method a path does not serve is 405 with our error body and an `Allow` header that lists
every method the path does serve (RFC 9110 §15.5.6). FastAPI keeps one route per method, so
the router's own `Allow` named only the first route it matched, and our error handler had
dropped even that: a fuzzer (schemathesis, check ST204) flagged every path."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

HTTP_METHODS = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}


def _documented(client: TestClient) -> dict[str, set[str]]:
    paths = client.get("/openapi.json").json()["paths"]
    return {path: {method.upper() for method in operations} for path, operations in paths.items()}


def _concrete(path: str) -> str:
    return path.replace("{", "x").replace("}", "")  # any id: a 405 is decided by the path alone


def test_every_documented_path_answers_an_unserved_method_with_allow(client: TestClient) -> None:
    for path, methods in _documented(client).items():
        unserved = next(method for method in ("TRACE", "PATCH", "DELETE") if method not in methods)
        response = client.request(unserved, _concrete(path))
        assert response.status_code == 405, (path, unserved, response.text)
        assert response.json()["error"] == "method_not_allowed"
        allowed = set(response.headers["Allow"].split(", "))
        assert methods <= allowed <= HTTP_METHODS, (path, allowed)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("TRACE", "/v1/payouts", "GET, POST"),  # two routes on one path
        ("PATCH", "/v1/settings", "GET, PUT"),
        ("DELETE", "/v1/accounts", "POST"),
        ("PUT", "/healthz", "GET"),
        ("DELETE", "/v1/transfers/txn_1/post", "POST"),
    ],
)
def test_allow_lists_exactly_the_served_methods(client: TestClient, method: str, path: str, allow: str) -> None:
    response = client.request(method, path)
    assert (response.status_code, response.headers.get("Allow")) == (405, allow)


def test_an_unknown_path_is_still_404_without_allow(client: TestClient) -> None:
    response = client.request("TRACE", "/v1/nothing-here")
    assert response.status_code == 404 and "Allow" not in response.headers
    assert response.json()["error"] == "not_found"
