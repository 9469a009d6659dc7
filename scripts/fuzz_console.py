"""The console's pages and forms (/ops) under schemathesis, for `scripts/fuzz`: no input may give
a 5xx there either. The console is not in the OpenAPI document (its pages are HTML, its inputs
read by hand from the query string and URL-encoded forms), so this script writes a document of
its own from the tables below, signs an operator in, and runs schemathesis on it with the
session's cookie and, in every form, the session's CSRF token: the fuzz reaches the handlers
rather than the sign-in redirect or the CSRF refusal. Path parameters take ids of real objects
(made here through the API, or listed from it) and one unknown id.

Standard library only but schemathesis (run as a program). `tests/integration/ops/
test_console_fuzz_routes.py` holds the tables to the app: every console route is fuzzed or left
out here with its reason.

    python scripts/fuzz_console.py --url URL --key API_KEY --name OPERATOR --token TOKEN \\
        --work DIR [--max-examples N] [--seed N] [--max-response-time S]
"""

from __future__ import annotations

import argparse
import http.cookies
import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

LIST_FILTERS = ["status", "tenant", "currency", "from", "to", "min", "max", "q", "starting_after"]
# GET pages: the query parameters each reads (`notice` is every page's flash).
PAGES: dict[str, list[str]] = {
    "/ops": ["notice"],
    "/ops/login": ["next"],
    "/ops/payments": LIST_FILTERS,
    "/ops/refunds": LIST_FILTERS,
    "/ops/payouts": LIST_FILTERS,
    "/ops/payments/{payment_id}": ["notice"],
    "/ops/refunds/{refund_id}": ["notice"],
    "/ops/payouts/{payout_id}": ["notice"],
    "/ops/in-doubt": ["tenant"],
    "/ops/faults": ["tenant"],
    "/ops/invariants": [],
    "/ops/settings": ["tenant", "notice"],
    "/ops/approvals": [],
    "/ops/disputes": ["status", "tenant", "after"],
    "/ops/disputes/{dispute_id}": ["notice"],
    "/ops/reconciliation": ["status", "type", "starting_after"],
    "/ops/reconciliation/breaks/{break_id}": ["notice"],
    "/ops/ledger": ["tenant", "code", "starting_after", "starting_after_tenant"],
    "/ops/ledger/accounts/{account_id}": ["tenant", "starting_after"],
    "/ops/webhooks": ["tenant", "endpoint", "status", "starting_after", "starting_after_tenant", "endpoints_after"],
    "/ops/audit": ["actor", "type", "object_id", "outcome", "from", "to", "tenant", "starting_after"],
    "/ops/losses": ["from", "to", "rail", "currency", "tenant", "starting_after", "starting_after_tenant"],
    "/ops/losses.csv": ["from", "to", "rail", "currency", "tenant"],
    "/ops/search": ["q", "tenant"],
}
# POST forms: their fields (every form but the sign-in's carries `csrf_token`, added below).
FORMS: dict[str, list[str]] = {
    "/ops/login": ["name", "token", "next"],
    "/ops/in-doubt/{kind}/{object_id}/ask": [],
    "/ops/in-doubt/{kind}/{object_id}/propose": ["outcome", "evidence"],
    "/ops/in-doubt/{kind}/{object_id}/confirm": ["note"],
    "/ops/in-doubt/{kind}/{object_id}/reject": ["note"],
    "/ops/refunds/{refund_id}/approve": [],
    "/ops/refunds/{refund_id}/cancel": [],
    "/ops/payments/{payment_id}/refunds": ["amount", "reason", "idempotency_key"],
    "/ops/payments/{payment_id}/capture": ["amount", "idempotency_key"],
    "/ops/payments/{payment_id}/cancel": ["idempotency_key"],
    "/ops/payouts/{payout_id}/cancel": [],
    "/ops/disputes/{dispute_id}/evidence": ["text", "idempotency_key"],
    "/ops/disputes/{dispute_id}/accept": ["idempotency_key"],
    "/ops/disputes/{dispute_id}/accept/approve": [],
    "/ops/disputes/{dispute_id}/accept/cancel": [],
    "/ops/disputes/{dispute_id}/refresh": [],
    "/ops/reconciliation/breaks/{break_id}/resolve": ["resolution", "note"],
    "/ops/events/{event_id}/redeliver": ["tenant_id"],
    "/ops/settings/{tenant_id}": ["refund_approval_threshold", "threshold_currency", "manual_resolution_after_seconds"],
}
# Tried first in every query parameter and form field (the examples phase), beside what the
# fuzzer generates: other scripts' digits and what `int()` reads that a number is not (a number
# is read by paycore.kit.numbers), a NUL, a right-to-left override, markup, a long text.
ADVERSARIAL = [
    "²",
    "\u0661\u0662",
    "\uff15",
    "①",
    "½",
    "1_000",
    " 7",
    "-1",
    "1e3",
    "9" * 40,
    "\x00",
    "\u202e1",
    "<b>",
    "x" * 5000,
]
LEFT_OUT = {("POST", "/ops/logout"): "ends the session the fuzz runs in (tests/integration/ops/test_sign_in.py)"}
UNKNOWN_ID = "id_unknown"
_CSRF = re.compile(r'<meta name="csrf-token" content="([0-9a-f]+)">')


def main() -> int:
    given = _arguments()
    cookie = sign_in(given.url, given.name, given.token)
    csrf = csrf_of(given.url, cookie)
    ids = real_ids(given.url, given.key)
    ids["tenant_id"] = [given.tenant, UNKNOWN_ID]
    work = Path(given.work)
    document = work / "console-openapi.json"
    document.write_text(json.dumps(console_document(csrf, ids), indent=1))
    found = ", ".join(f"{name} {len(values) - 1}" for name, values in sorted(ids.items()))
    print(f"== fuzz (console): {len(PAGES)} pages and {len(FORMS)} forms as operator {given.name}", flush=True)
    print(f"   real ids in the path parameters (and one unknown each): {found}", flush=True)
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        str(document),
        "--url",
        given.url,
        "--checks",
        "not_a_server_error",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(given.max_examples),
        "--seed",
        str(given.seed),
        "--workers",
        "1",
        "--max-response-time",
        str(given.max_response_time),
        "--request-timeout",
        "30",
        "--generation-database",
        "none",
        "--no-color",
        "--header",
        f"Cookie: paycore_ops={cookie}",
    ]
    status = subprocess.run(command, cwd=work, check=False).returncode
    if _status(given.url, "/ops", cookie) != 200:  # else the run met the sign-in redirect, not the pages
        print("the console session ended during the fuzz: its pages were not reached", file=sys.stderr)
        return 1
    return status


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("--url", "--key", "--tenant", "--name", "--token", "--work"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-examples", type=int, default=25)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--max-response-time", type=float, default=5)
    return parser.parse_args()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _call(url: str, method: str, path: str, *, body: bytes | None = None, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(url + path, data=body, method=method, headers=headers)
    try:
        return _OPENER.open(request, timeout=30)
    except urllib.error.HTTPError as answer:
        return answer


def sign_in(url: str, name: str, token: str) -> str:
    form = urllib.parse.urlencode({"name": name, "token": token}).encode()
    answer = _call(url, "POST", "/ops/login", body=form, headers={"Content-Type": "application/x-www-form-urlencoded"})
    jar = http.cookies.SimpleCookie(answer.headers.get("Set-Cookie", ""))
    if answer.status != 303 or "paycore_ops" not in jar:
        raise SystemExit(f"signing in as {name} answered {answer.status}")
    return jar["paycore_ops"].value


def csrf_of(url: str, cookie: str) -> str:
    page = _call(url, "GET", "/ops", headers={"Cookie": f"paycore_ops={cookie}"}).read().decode()
    found = _CSRF.search(page)
    if found is None:
        raise SystemExit("no CSRF token on /ops")
    return found.group(1)


def _status(url: str, path: str, cookie: str) -> int:
    return int(_call(url, "GET", path, headers={"Cookie": f"paycore_ops={cookie}"}).status)


def _api(url: str, key: str, method: str, path: str, body: dict[str, Any] | None = None, *, once: str = "") -> Any:
    idempotency_key = f"fuzz-{path}{once}"
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Idempotency-Key": idempotency_key}
    answer = _call(url, method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
    return json.loads(answer.read() or b"{}")


def real_ids(url: str, key: str) -> dict[str, list[str]]:
    """Ids the pages and forms find: a paid payment and a refund of it made now, an
    authorization (the capture and cancel forms), a `tok_disputed` payment (its dispute, once the
    sandbox opened it and its webhook arrived), and a few of each kind the API fuzz left behind."""
    merchant = {"code": "fuzz.console", "currency": "USD", "normal_balance": "credit"}
    account = _api(url, key, "POST", "/v1/accounts", merchant)
    paid = {
        "amount_minor": 5000,
        "currency": "USD",
        "source": {"type": "card", "token": "tok_ok"},
        "destination_account": account.get("id"),
    }
    payment = _api(url, key, "POST", "/v1/payments", paid)
    _api(url, key, "POST", f"/v1/payments/{payment.get('id')}/refunds", {"amount_minor": 100})
    _api(url, key, "POST", "/v1/payments", {**paid, "capture": "manual"}, once="-manual")  # one to capture
    disputed = {**paid, "source": {"type": "card", "token": "tok_disputed"}}
    _api(url, key, "POST", "/v1/payments", disputed, once="-disputed")  # the sandbox disputes it a second later
    listed = {
        "payment_id": "/v1/payments?limit=3",
        "refund_id": "/v1/refunds?limit=3",
        "payout_id": "/v1/payouts?limit=3",
        "break_id": "/v1/reconciliation/breaks?limit=3",
        "event_id": "/v1/events?limit=3",
        "dispute_id": "/v1/disputes?limit=3",
    }
    ids = {
        name: [str(item["id"]) for item in _api(url, key, "GET", path).get("data", [])] for name, path in listed.items()
    }
    ids["account_id"] = [str(account["id"])] if "id" in account else []
    ids["object_id"] = [*ids["payment_id"][:2], *ids["refund_id"][:2], *ids["payout_id"][:2]]
    ids["kind"] = ["payment", "refund", "payout"]
    return {name: [*sorted(set(found)), UNKNOWN_ID] for name, found in ids.items()}


def console_document(csrf: str, ids: dict[str, list[str]]) -> dict[str, Any]:
    """An OpenAPI 3.0 document of the console: every value a string, as the browser sends it."""
    paths: dict[str, dict[str, Any]] = {}
    for path, names in PAGES.items():
        parameters = [_query(name) for name in names] + _path_parameters(path, ids)
        paths.setdefault(path, {})["get"] = {"parameters": parameters, "responses": _ANY}
    for path, names in FORMS.items():
        fields: dict[str, Any] = {name: {"type": "string"} for name in names}
        token = {} if path == "/ops/login" else {"csrf_token": csrf}
        fields |= {name: {"type": "string", "enum": [value]} for name, value in token.items()}
        schema = {"type": "object", "properties": fields, "required": list(token), "additionalProperties": False}
        examples = {f"adversarial{n}": {"value": {**dict.fromkeys(names, text), **token}} for n, text in _numbered()}
        form = {"schema": schema, "examples": examples} if names else {"schema": schema}
        paths.setdefault(path, {})["post"] = {
            "parameters": _path_parameters(path, ids),
            "requestBody": {"required": True, "content": {"application/x-www-form-urlencoded": form}},
            "responses": _ANY,
        }
    return {"openapi": "3.0.3", "info": {"title": "paycore console (fuzz)", "version": "1"}, "paths": paths}


_ANY = {"default": {"description": "an HTML page, a redirect or a CSV file"}}


def _query(name: str) -> dict[str, Any]:
    examples = {f"adversarial{n}": {"value": text} for n, text in _numbered()}
    return {"name": name, "in": "query", "required": False, "schema": {"type": "string"}, "examples": examples}


def _numbered() -> list[tuple[int, str]]:
    return list(enumerate(ADVERSARIAL))


def _path_parameters(path: str, ids: dict[str, list[str]]) -> list[dict[str, Any]]:
    return [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string", "enum": ids[name]}}
        for name in re.findall(r"{(\w+)}", path)
    ]


if __name__ == "__main__":
    raise SystemExit(main())
