"""Schemathesis hooks for `scripts/fuzz` (loaded through SCHEMATHESIS_HOOKS).

One check, `documented_acceptance`, in place of schemathesis' `positive_data_acceptance`
(ST202), which refuses any 400 to a request the schema allows. paycore enforces rules JSON
Schema cannot state: an amount written `1235.0` (draft 2020-12 calls it an integer), an
IBAN's check digits, a cursor naming an object that exists, a signature only the processor can
make. The document states each such rule in the description of the field it concerns, naming
the error code (src/paycore/http/openapi.py). This check holds the server to exactly that: a
request generated as schema-valid may be answered

- 2xx, or 401/403/404/409 (who asks, and what exists: not the request's shape), or
- 402 (a decline by the processor) or 422 (a refusal by the state of the books:
  insufficient_funds, over_refund, ...), which no schema can foresee either, or
- 400 only when the error body names a `param` whose description in the document names the
  error code. Anything else (a 400 with no param, or for a reason the document does not
  give) fails, as ST202 would.
"""

from __future__ import annotations

import atexit
import re
from collections import Counter
from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import is_unexpected_http_status_case

_INDEX = re.compile(r"\[\d+\]")
ACCEPTED = {401, 402, 403, 404, 409, 422}
# What this check let through, printed when the run ends: a reviewer sees which documented
# rules the generated data met, and how often.
documented = Counter[str]()


@atexit.register
def _summary() -> None:
    if documented:
        print("documented refusals of schema-valid requests (400 code on param: count):")
        for reason, count in sorted(documented.items()):
            print(f"  {reason}: {count}")


@schemathesis.check
def documented_acceptance(ctx: Any, response: Any, case: Any) -> bool | None:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or is_unexpected_http_status_case(case):
        return None
    status = response.status_code
    if status < 300 or status in ACCEPTED or status >= 500:  # 5xx: not_a_server_error's to judge
        return None
    code, param = _error(response)
    if status == 400 and param is not None and code is not None:
        if any(code in text for text in _descriptions(case, param)):
            field = _INDEX.sub("[]", param)
            documented[f"{case.operation.label}: {code} on {field}"] += 1
            return None
        raise AssertionError(
            f"Schema-valid request refused with 400 {code} on {param!r}, "
            f"and the document's description of {param!r} does not name {code}"
        )
    raise AssertionError(
        f"Schema-valid request refused with {status} {code} (param {param!r}) and no documented reason"
    )


def _error(response: Any) -> tuple[str | None, str | None]:
    try:
        body = response.json()
    except ValueError:
        return None, None
    if not isinstance(body, dict):
        return None, None
    code, param = body.get("error"), body.get("param")
    return (code if isinstance(code, str) else None), (param if isinstance(param, str) else None)


def _descriptions(case: Any, param: str) -> list[str]:
    """What the document says of `param` (a parameter name, or a body path such as
    `lines[0].currency` or `beneficiary.iban`) in this operation."""
    document = case.operation.schema.raw_schema
    operation = case.operation.definition.raw
    found = [
        str(parameter.get("description", ""))
        for parameter in operation.get("parameters", [])
        if isinstance(parameter, dict) and parameter.get("name", "").lower() == param.lower()
    ]
    name = _INDEX.sub("", param).split(".")[-1]
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    _collect(document, body, name, found, seen=set())
    return found


def _collect(document: dict[str, Any], schema: Any, name: str, found: list[str], seen: set[str]) -> None:
    if isinstance(schema, list):
        for item in schema:
            _collect(document, item, name, found, seen)
        return
    if not isinstance(schema, dict):
        return
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference not in seen:
        seen.add(reference)
        _collect(document, _resolve(document, reference), name, found, seen)
    for key, value in schema.get("properties", {}).items():
        if key == name:
            found.append(str(value.get("description", "")))
            if isinstance(value.get("$ref"), str):
                found.append(str(_resolve(document, value["$ref"]).get("description", "")))
    for key, value in schema.items():
        if key != "properties" and isinstance(value, dict | list):
            _collect(document, value, name, found, seen)
    for value in schema.get("properties", {}).values():
        _collect(document, value, name, found, seen)


def _resolve(document: dict[str, Any], reference: str) -> dict[str, Any]:
    node: Any = document
    for part in reference.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node if isinstance(node, dict) else {}
