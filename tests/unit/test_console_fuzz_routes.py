"""`scripts/fuzz_console.py` fuzzes every page and form of the console (/ops), or says why not:
a console route added without its query parameters or fields in the fuzz's tables fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from fastapi.routing import APIRoute

from paycore.config import Settings
from paycore.http.app import create_app


def _fuzz_console(repo_root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_console", repo_root / "scripts" / "fuzz_console.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_console_route_is_fuzzed_or_left_out_with_a_reason(repo_root: Path, tmp_path: Path) -> None:
    fuzz = _fuzz_console(repo_root)
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'unused.db'}"))
    served = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, APIRoute) and route.path.startswith("/ops")
        for method in route.methods or ()
    }
    fuzzed = {("GET", path) for path in fuzz.PAGES} | {("POST", path) for path in fuzz.FORMS}
    assert served == fuzzed | set(fuzz.LEFT_OUT), (served - fuzzed - set(fuzz.LEFT_OUT), fuzzed - served)
    assert not fuzzed & set(fuzz.LEFT_OUT)
    assert all(reason for reason in fuzz.LEFT_OUT.values())


def test_the_document_puts_the_sessions_csrf_token_in_every_form_but_the_sign_in(repo_root: Path) -> None:
    fuzz = _fuzz_console(repo_root)
    ids = {
        name: ["x_1", fuzz.UNKNOWN_ID]
        for name in ("payment_id", "refund_id", "payout_id", "break_id", "event_id", "dispute_id")
    }
    ids |= {"account_id": ["acct_1"], "object_id": ["x_1"], "kind": ["payment"], "tenant_id": ["fuzz"]}
    document = fuzz.console_document("f" * 64, ids)
    for path, operations in document["paths"].items():
        if "post" not in operations:
            continue
        schema = operations["post"]["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"]
        if path == "/ops/login":
            assert "csrf_token" not in schema["properties"]
        else:
            assert schema["properties"]["csrf_token"] == {"type": "string", "enum": ["f" * 64]}, path
            assert schema["required"] == ["csrf_token"], path
