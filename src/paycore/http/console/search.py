"""The console's search (`GET /ops/search?q=`, docs/operations-console.md "Search"): one box in
every page's header finds payments, refunds, payouts and disputes by id, reference, idempotency
key or metadata value, in the tenant(s) the person may see (`scope.tenant_of`).

Each id, reference and key is one index lookup (migration 0041 leads an index with each searched
column), never a read of a tenant's history; each kind answers at most `MATCHES_MAX` rows per
column. Metadata has no index: its values are matched among the newest `METADATA_WINDOW_ROWS`
payments and payouts of the scope (a bounded read of the id index's newest end; the database
keeps the rows whose metadata text holds the value, then each top-level value is compared here,
exactly). An id that names exactly one object, and nothing else matches, goes straight to its
page (303)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import Connection

from paycore.disputes import service as disputes
from paycore.http.console import render, scope
from paycore.http.console.scope import KINDS, BadFilter
from paycore.http.console.session import principal
from paycore.http.routing import JsonRoute
from paycore.operators.types import Principal

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(principal)]

QUERY_CHARS_MIN: Final = 3  # shorter matches too much to be an id, a reference or a key
QUERY_CHARS_MAX: Final = 255  # the longest idempotency key
MATCHES_MAX: Final = 20  # rows per kind and column
METADATA_WINDOW_ROWS: Final = 5_000  # the newest objects of each kind whose metadata is read
# The columns of each kind searched, beside metadata, and how the page names them.
COLUMNS: Final = {
    "payments": (("id", "id"), ("processor_reference", "processor reference"), ("idempotency_key", "idempotency key")),
    "refunds": (("id", "id"), ("processor_reference", "processor reference"), ("idempotency_key", "idempotency key")),
    "payouts": (("id", "id"), ("bank_reference", "bank reference"), ("idempotency_key", "idempotency key")),
    "disputes": (("id", "id"), ("processor_dispute_id", "processor dispute id")),
}
WITH_METADATA: Final = ("payments", "payouts")
KIND_ORDER: Final = ("payments", "refunds", "payouts", "disputes")


@dataclass
class Match:
    """An object found, and every way the query matched it (`id`, `metadata order_id`, ...)."""

    plural: str  # payments
    item: Any  # a Payment, Refund, Payout or Dispute
    matched: list[str]

    @property
    def href(self) -> str:
        return f"/ops/{self.plural}/{self.item.id}"

    @property
    def status(self) -> str:
        kind = KINDS.get(self.plural)
        return str(self.item.status if kind is None else kind.machine.public(self.item.status))


def checked_query(raw: str) -> str:
    """The query as searched (surrounding blanks dropped), or BadFilter saying the limits."""
    query = raw.strip()
    if len(query) < QUERY_CHARS_MIN:
        raise BadFilter(
            f"type at least {QUERY_CHARS_MIN} characters (query_chars_min = {QUERY_CHARS_MIN}): "
            "an id, a reference, an idempotency key or a metadata value"
        )
    if len(query) > QUERY_CHARS_MAX:
        raise BadFilter(
            f"the query is {len(query)} characters; at most {QUERY_CHARS_MAX} (query_chars_max = {QUERY_CHARS_MAX})"
        )
    if not query.isprintable():  # a NUL, a line break: in no id, reference or key (PostgreSQL refuses a NUL)
        raise BadFilter("the query must be printable characters only (no control character such as a NUL)")
    return query


def find(connection: Connection, query: str, tenant_id: str | None) -> dict[str, list[Match]]:
    """Every kind's matches, newest first, by kind (kinds without a match left out)."""
    found: dict[str, dict[tuple[str, str], Match]] = {plural: {} for plural in KIND_ORDER}
    for plural, columns in COLUMNS.items():
        for column, label in columns:
            for item in _matching(connection, plural, column, query, tenant_id):
                _add(found[plural], plural, item, label)
    for plural in WITH_METADATA:
        for item, key in _metadata_matching(connection, plural, query, tenant_id):
            _add(found[plural], plural, item, f"metadata {key}")
    return {
        plural: sorted(matches.values(), key=lambda match: match.item.id, reverse=True)
        for plural, matches in found.items()
        if matches
    }


def _matching(connection: Connection, plural: str, column: str, query: str, tenant_id: str | None) -> list[Any]:
    if plural == "disputes":
        return disputes.matching(connection, column, query, tenant_id=tenant_id, limit=MATCHES_MAX)
    return KINDS[plural].machine.matching(connection, column, query, tenant_id=tenant_id, limit=MATCHES_MAX)


def _metadata_matching(connection: Connection, plural: str, query: str, tenant_id: str | None) -> list[tuple[Any, str]]:
    """(item, the metadata key whose value is `query`) among the newest objects of the kind."""
    machine = KINDS[plural].machine
    needle = json.dumps(query)  # as the metadata column holds a string value (json.dumps, ASCII)
    candidates = machine.metadata_matching(
        connection, needle, tenant_id=tenant_id, window=METADATA_WINDOW_ROWS, limit=MATCHES_MAX
    )
    keys: dict[tuple[str, str], str] = {}
    for item_tenant, item_id, text in candidates:
        stored = json.loads(text)
        matched = sorted(key for key, value in stored.items() if value == query)
        if matched:
            keys[(item_tenant, item_id)] = matched[0]
    items = machine.find_many(connection, list(keys))
    return [(items[key], name) for key, name in keys.items() if key in items]


def _add(matches: dict[tuple[str, str], Match], plural: str, item: Any, label: str) -> None:
    key = (item.tenant_id, item.id)
    if key in matches:
        matches[key].matched.append(label)
    else:
        matches[key] = Match(plural, item, [label])


def only_by_id(groups: dict[str, list[Match]]) -> Match | None:
    """The one object found, when it is the only match and its id is the query."""
    matches = [match for group in groups.values() for match in group]
    if len(matches) == 1 and "id" in matches[0].matched:
        return matches[0]
    return None


@router.get("/search")
def search_page(request: Request, who: Who) -> Response:
    raw = request.query_params.get("q", "")[: QUERY_CHARS_MAX * 4]
    given = {"q": raw, "tenant": request.query_params.get("tenant", "")[:255]}
    context: dict[str, Any] = {"given": given, "groups": {}, "limits": _limits()}
    if raw.strip() == "":
        return render.page(request, "search.html", **context, searched=False)
    try:
        tenant_id = scope.tenant_of(who, given["tenant"])
        query = checked_query(raw)
    except BadFilter as error:
        return render.page(request, "search.html", 400, **context, searched=False, flash=str(error), flash_error=True)
    with request.app.state.database.read() as connection:
        groups = find(connection, query, tenant_id)
    single = only_by_id(groups)
    if single is not None:
        return RedirectResponse(single.href, status_code=303)
    return render.page(request, "search.html", **(context | {"groups": groups}), searched=True)


def _limits() -> dict[str, int]:
    return {
        "query_chars_min": QUERY_CHARS_MIN,
        "query_chars_max": QUERY_CHARS_MAX,
        "matches_max": MATCHES_MAX,
        "metadata_window_rows": METADATA_WINDOW_ROWS,
    }
