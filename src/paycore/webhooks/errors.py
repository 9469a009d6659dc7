"""Outgoing webhooks' errors: what a caller (the HTTP API, the worker) tells apart.

The ones an API request can meet are domain errors with a stable code (docs/errors.md); the
HTTP layer alone maps their family to a status."""

from __future__ import annotations

from paycore.kit.errors import InvalidRequest, NotFound


class InvalidWebhookUrl(InvalidRequest):
    """The endpoint's URL is refused: not https outside local mode, credentials in it, too
    long, or a loopback, link-local or private address outside local mode (the SSRF guard)."""

    code = "invalid_webhook_url"


class InvalidEventTypes(InvalidRequest):
    """`events` names a type paycore does not emit (the list: docs/webhooks.md)."""

    code = "invalid_event_types"


class EndpointNotFound(NotFound):
    """No webhook endpoint with this id in this tenant."""

    code = "webhook_endpoint_not_found"


class EventNotFound(NotFound):
    """No event with this id in this tenant."""

    code = "event_not_found"


class Unsafe(Exception):
    """At delivery time: the endpoint's host resolves to an address the SSRF guard refuses
    (or does not resolve). Nothing was sent."""
