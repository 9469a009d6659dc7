"""What the console's report pages share: reading their filters and cursors, and answering a bad
one with the page and its reason (400)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from fastapi import Request
from fastapi.responses import Response

from paycore.http.console import render, scope
from paycore.http.console.scope import BadFilter
from paycore.kit.errors import DomainError, InvalidAmount
from paycore.kit.money import InvalidAmountError, parse_major
from paycore.operators.types import Principal

TEXT_FILTER_CHARS_MAX: Final = 64  # the audit log's columns; an account code's is 128


def given(request: Request, names: Sequence[str]) -> dict[str, str]:
    return {name: request.query_params.get(name, "").strip()[:255] for name in names}


def text(given: dict[str, str], name: str, chars_max: int = TEXT_FILTER_CHARS_MAX) -> str | None:
    value = given[name] or None
    if value is not None and len(value) > chars_max:
        raise BadFilter(f"{name} is at most {chars_max} characters")
    return value


def cursor(request: Request, who: Principal, tenant_id: str | None, name: str = "starting_after") -> Any:
    """The page's cursor: (tenant, id), the tenant being the list's own or, across tenants, the
    `after_tenant` the previous page's link carried."""
    after_id = text(given(request, (name,)), name)
    if after_id is None:
        return None
    after_tenant = tenant_id or scope.tenant_of(who, request.query_params.get(f"{name}_tenant"))
    if after_tenant is None:
        raise BadFilter(f"{name} needs {name}_tenant across tenants (follow the Next page link)")
    return (after_tenant, after_id)


def amount_minor(typed: str, currency: str, param: str = "amount") -> int:
    """A form's amount typed in major units (`12.5`, `1,250.00`; `1250` JPY) in minor units,
    positive, by `kit.money.parse_major` (no float); InvalidAmount (400) with the reason
    otherwise. Its ceiling (capturable, refundable) is the operation's own rule."""
    try:
        found = parse_major(typed, currency)
    except InvalidAmountError as error:
        raise InvalidAmount(str(error), param=param) from error
    if found == 0:
        raise InvalidAmount("the amount must be more than 0", param=param)
    return found


def refused(request: Request, template: str, error: Exception, **context: Any) -> Response:
    return render.page(request, template, 400, flash=message(error), flash_error=True, **context)


def message(error: Exception) -> str:
    return error.message if isinstance(error, DomainError) else str(error)
