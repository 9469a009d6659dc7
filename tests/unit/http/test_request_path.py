"""`idempotent.request_path` is `request.url.path` for every path (a key's fingerprint names it)."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from paycore.http.idempotent import request_path

PATHS = [
    "/v1/payments",
    "/v1/payments/pay_01/capture",
    "/v1/payments\n",
    "/v1/payments\t",
    "/v1/pay ments",
    "/v1/payments ",
    "//v1/payments",
    "/v1/pay?ments",
    "/v1/pay#ments",
    "/v1/pay\\ments",
    "/v1/pay%2Fments",
    "/v1/paymënts",
    "/v1/pay\x7fments",
    "/v1/pay\x00ments",
    "",
]


@pytest.mark.parametrize("host", [b"127.0.0.1:8000", None, b"bad host/"])
@pytest.mark.parametrize("path", PATHS)
def test_request_path_is_the_url_path(path: str, host: bytes | None) -> None:
    headers = [] if host is None else [(b"host", host)]
    scope = {"type": "http", "method": "POST", "path": path, "root_path": "", "query_string": b"q=1",
             "headers": headers, "server": ("127.0.0.1", 8000), "scheme": "http"}  # fmt: skip
    request = Request(scope)
    assert request_path(request) == request.url.path
