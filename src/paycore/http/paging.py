"""Cursor paging, written once for every list endpoint: `limit` (at most the deployment's
`page_limit_max`), `starting_after` (the last item of the page before) and the answer
`{"object": "list", "data": [...], "has_more": ...}`.

A paged list reads one item more than it answers (`fetch`): that item, if it came back, is
`has_more`. The services check `starting_after` (a cursor of the tenant's, or a refusal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, TypeVar

from fastapi import Depends, Query, Request
from fastapi.responses import Response

from paycore.http.errors import json_response
from paycore.http.responses import StartingAfter
from paycore.kit.errors import InvalidRequest
from paycore.schemas import QUERY_DIGITS

T = TypeVar("T")

LIMIT_MAX: Final = 100  # the largest `limit` a client may ask for (the settings may lower it)
# The `limit` query parameter of a paged list (each endpoint gives its default).
Limit = Annotated[int, Query(ge=1, le=LIMIT_MAX), QUERY_DIGITS]


LIMIT_DEFAULT: Final = 20


@dataclass(frozen=True)
class Page:
    """A paged list's query: how many items the page answers (`limit`, at most the settings'
    `page_limit_max`) and the cursor it starts after."""

    limit: int
    starting_after: str | None

    @property
    def fetch(self) -> int:
        """How many items to read: one more than the page answers, to know whether more follow."""
        return self.limit + 1

    def json(self, found: Sequence[T], render: Callable[[T], Any]) -> Response:
        """The page of `found` (read with `fetch`): its first `limit` items rendered."""
        return list_json([render(item) for item in found[: self.limit]], has_more=len(found) > self.limit)


def limit_of(request: Request, limit: int) -> int:
    """How many items a page answers: what the client asked, at most `page_limit_max`."""
    page_limit_max: int = request.app.state.settings.page_limit_max
    return min(limit, page_limit_max)


def page_query(request: Request, limit: Limit = LIMIT_DEFAULT, starting_after: StartingAfter = None) -> Page:
    """The `limit` and `starting_after` query parameters of every paged list."""
    return Page(limit_of(request, limit), starting_after)


# An endpoint's paged query (the parameters are documented as the endpoint's own).
PageQuery = Annotated[Page, Depends(page_query)]


def status_filter(status: str | None, names: Sequence[str]) -> str | None:
    """A list's `?status=`: one of `names` (as the client spells them), or a 400 naming them."""
    if status is not None and status not in names:
        raise InvalidRequest(f"status must be one of {', '.join(names)}", param="status")
    return status


def list_body(data: Iterable[Any], *, has_more: bool = False) -> dict[str, Any]:
    """A list's answer; `has_more` False for a list answered whole."""
    return {"object": "list", "data": list(data), "has_more": has_more}


def list_json(data: Iterable[Any], *, has_more: bool = False) -> Response:
    return json_response(200, list_body(data, has_more=has_more))
