"""Rendering the console's pages: one Jinja2 environment, the filters every page uses, and the
one function that turns a template into a response.

Money is rendered in major units by integer arithmetic in its currency's exponent, the thousands
grouped (`1,000.00 USD`, `1,234 JPY`: `kit.money.format_grouped`), never through a float. Times
are UTC. No asset comes from outside: the stylesheet is inline in the base template, so every
page works offline.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Final

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from paycore.http.console import session
from paycore.kit.clock import to_rfc3339
from paycore.kit.money import CURRENCY_EXPONENTS, format_grouped, format_minor
from paycore.operators.service import is_second_person
from paycore.operators.types import Principal
from paycore.payments.schemas import in_doubt_operation
from paycore.payouts.validation import mask

_ENVIRONMENT: Final = Environment(
    loader=PackageLoader("paycore.http.console", "templates"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_HEADERS: Final = {
    # Nothing external, nothing framed, no script but none at all: the console needs none.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def money(amount_minor: int | None, currency: str | None) -> str:
    """1,012.34 USD: for people (a form's value is `major`, without the currency)."""
    if amount_minor is None or currency is None:
        return "—"
    if currency not in CURRENCY_EXPONENTS:
        return f"{amount_minor} {currency} (minor units)"
    return f"{format_grouped(amount_minor, currency)} {currency}"


def major(amount_minor: int, currency: str) -> str:
    """12.34: an amount as a person types it in a form (`kit.money.parse_major` reads it back)."""
    return format_minor(amount_minor, currency)


def masked(identifier: str | None) -> str:
    """•••• 6789: a bank account number or IBAN by its last four only (`payouts.validation.mask`,
    as the API answers it); the whole one never reaches a page."""
    last_four = mask(identifier)
    return "—" if last_four is None else f"•••• {last_four}"


def when(timestamp_us: int | None) -> str:
    """2026-12-04 21:30:05Z (UTC, to the second)."""
    if timestamp_us is None:
        return "—"
    text = to_rfc3339(timestamp_us)
    return text[:10] + " " + text[11:19] + "Z"


def age(since_us: int | None, now_us: int) -> str:
    """How long ago, largest two units: 3d 4h, 5m 2s, 0s."""
    if since_us is None:
        return "—"
    seconds = max(0, now_us - since_us) // 1_000_000
    parts: list[str] = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


def left(until_us: int | None, now_us: int) -> str:
    """How long until `until_us` (largest two units, as `age`), or how long ago it passed."""
    if until_us is None:
        return "—"
    if until_us < now_us:
        return f"passed {age(until_us, now_us)} ago"
    return f"{age(now_us, until_us)} left"


def due(dispute: Any, now_us: int) -> str:
    """A dispute's time left to answer: `2d 3h left`, `overdue by 5h 2m`; `evidence in` once it
    is under review, `closed` once decided (SPEC §6.2's statuses)."""
    if dispute.status == "under_review":
        return "evidence in"
    if dispute.status not in ("needs_response", "warning_needs_response"):
        return "closed"
    if dispute.evidence_due_by_us < now_us:
        return f"overdue by {age(dispute.evidence_due_by_us, now_us)}"
    return f"{age(now_us, dispute.evidence_due_by_us)} left"


def second_person(who: Principal, asked_by: str | None) -> bool:
    """Whether the person may give the second word on what `asked_by` asked for (approve a
    refund, confirm or reject a manual resolution): the console never offers it to who asked;
    the service refuses it all the same (`operators.four_eyes`)."""
    return is_second_person(who.actor, asked_by)


def query(params: dict[str, Any], **changes: Any) -> str:
    """The page's query string with `changes` (None removes a parameter)."""
    merged = {**params, **changes}
    return urllib.parse.urlencode({key: value for key, value in merged.items() if value not in (None, "")})


_ENVIRONMENT.filters.update(money=money, major=major, masked=masked, when=when, query=query)
_ENVIRONMENT.globals.update(
    age=age,
    left=left,
    due=due,
    second_person=second_person,
    in_doubt_operation=in_doubt_operation,  # as the API says it
    currencies=tuple(sorted(CURRENCY_EXPONENTS)),  # a form's currency picker
)


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """Render `template` for the request's principal, with its CSRF token."""
    who = session.principal(request)
    notice = request.query_params.get("notice")
    if notice and "flash" not in context:
        context["flash"] = notice[:500]  # the result of the action that led here (escaped)
    html = _ENVIRONMENT.get_template(template).render(
        who=who,
        csrf=session.csrf_token(request),
        path=request.url.path,
        **context,
    )
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def bare(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page without a principal (the sign-in form, a refusal)."""
    html = _ENVIRONMENT.get_template(template).render(who=None, csrf="", path="", **context)
    return HTMLResponse(html, status_code=status, headers=_HEADERS)
