"""What the console's pages share: the tenant a person sees, the kinds of money objects and the
filters of their lists."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Final

from fastapi import Request
from sqlalchemy import Connection

from paycore.kit.clock import DAY_US, day_start_us
from paycore.kit.money import CURRENCY_EXPONENTS, InvalidAmountError, parse_major
from paycore.lifecycle.machine import Machine
from paycore.lifecycle.store import Search
from paycore.operators.types import Principal
from paycore.payments import service as payments
from paycore.payouts import service as payouts
from paycore.refunds import service as refunds

PAGE_ROWS: Final = 50
_DAY: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TENANT: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class BadFilter(ValueError):
    """A filter a person typed that cannot be applied (the page says which and why)."""


@dataclass(frozen=True)
class Kind:
    name: str  # payment
    plural: str  # payments
    machine: Machine[Any]
    statuses: tuple[str, ...]  # public names, in the order a person reads them


KINDS: Final = {
    "payments": Kind(
        "payment",
        "payments",
        payments.MACHINE,
        ("processing", "in_doubt", "requires_capture", "succeeded", "failed", "canceled"),
    ),
    "refunds": Kind(
        "refund",
        "refunds",
        refunds.MACHINE,
        ("requires_approval", "pending", "processing", "in_doubt", "succeeded", "failed", "canceled"),
    ),
    "payouts": Kind(
        "payout",
        "payouts",
        payouts.MACHINE,
        ("scheduled", "queued", "processing", "in_doubt", "sent", "settled", "failed", "returned", "canceled"),
    ),
}
BY_NAME: Final = {kind.name: kind for kind in KINDS.values()}


def tenant_of(who: Principal, requested: str | None) -> str | None:
    """The tenant a page shows: a tenant operator's own, always; else the one asked for, or all."""
    if who.scope is not None:
        return who.scope
    if requested in (None, ""):
        return None
    if _TENANT.fullmatch(requested) is None:
        raise BadFilter("tenant must be a tenant id (1-64 characters of [A-Za-z0-9_.-])")
    return requested


def day_bounds(raw_from: str | None, raw_to: str | None) -> tuple[int | None, int | None]:
    """[from 00:00, to + 1 day 00:00) in UTC microseconds, from YYYY-MM-DD days."""
    return _day(raw_from, "from"), None if (last := _day(raw_to, "to")) is None else last + DAY_US


def _day(raw: str | None, name: str) -> int | None:
    if raw in (None, ""):
        return None
    if _DAY.fullmatch(raw) is None:
        raise BadFilter(f"{name} must be a day YYYY-MM-DD (UTC)")
    try:
        return day_start_us(dt.date.fromisoformat(raw))
    except ValueError as error:
        raise BadFilter(f"{name} must be a real day YYYY-MM-DD") from error


def currency_of(raw: str | None) -> str | None:
    """The list's currency filter: a known ISO 4217 code, or None for any."""
    if raw in (None, ""):
        return None
    if raw not in CURRENCY_EXPONENTS:
        raise BadFilter(f"currency must be one of {', '.join(sorted(CURRENCY_EXPONENTS))}")
    return raw


def amount(raw: str | None, name: str, currency: str | None) -> int | None:
    """An amount typed in major units of `currency` (`12.50`, `1,250.00`; a JPY `1250`), as
    minor units: `kit.money.parse_major`, string arithmetic, never a float. A filter compares
    integers of one currency, so an amount needs the currency it is written in."""
    if raw in (None, ""):
        return None
    if currency is None:
        raise BadFilter(f"{name} is an amount in major units of a currency: pick the currency it is in (e.g. USD)")
    try:
        return parse_major(raw, currency)
    except InvalidAmountError as error:
        raise BadFilter(f"{name}: {error}") from error


FILTERS: Final = ("status", "tenant", "currency", "from", "to", "min", "max", "q")


def given_filters(request: Request) -> dict[str, str]:
    return {name: request.query_params.get(name, "")[:255] for name in FILTERS}


def search_of(request: Request, who: Principal, kind: Kind) -> tuple[Search, dict[str, str]]:
    """The list's search from the query string, and the filters as given (for the form)."""
    given = given_filters(request)
    status = given["status"] or None
    if status is not None and status not in kind.statuses:
        raise BadFilter(f"status must be one of {', '.join(kind.statuses)}")
    created_gte, created_lt = day_bounds(given["from"], given["to"])
    reference = given["q"].strip()[:255] or None
    currency = currency_of(given["currency"])
    search = Search(
        tenant_id=tenant_of(who, given["tenant"]),
        statuses=None if status is None else (status,),
        created_gte_us=created_gte,
        created_lt_us=created_lt,
        currency=currency,
        amount_gte_minor=amount(given["min"], "min", currency),
        amount_lte_minor=amount(given["max"], "max", currency),
        reference=reference,
        starting_after=request.query_params.get("starting_after") or None,
        limit=PAGE_ROWS + 1,
    )
    return search, given


def find(connection: Connection, who: Principal, kind: Kind, object_id: str) -> Any:
    """The object, if the person may see it (a tenant operator sees only their tenant's)."""
    return kind.machine.find_any(connection, object_id, tenant_id=who.scope)
