"""The FastAPI application: routers, error handlers, the body bound, metrics, the request id
and access line, and the guard that refuses unsafe requests arriving on a non-loopback address
(ADR 0013)."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp

import paycore
from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http import console, docs, errors, openapi
from paycore.http.context import AuthState
from paycore.http.exposure import ExposureGuard
from paycore.http.lean import LeanDispatch
from paycore.http.metrics import Metrics
from paycore.http.middleware import BodyLimit
from paycore.http.money import batches as money_batches
from paycore.http.money import credits as money_credits
from paycore.http.money import payment_operations as money_payment_operations
from paycore.http.money import payments as money_payments
from paycore.http.money import payouts as money_payouts
from paycore.http.money import refunds as money_refunds
from paycore.http.money import transfer_operations as money_transfer_operations
from paycore.http.money import transfers as money_transfers
from paycore.http.money import webhooks as money_webhooks
from paycore.http.refusals import RefusalAudit
from paycore.http.request_id import RequestContext
from paycore.http.routers import (
    audit,
    credits,
    disputes,
    events,
    health,
    ledger,
    payments,
    payouts,
    processor_webhooks,
    reconciliation,
    refunds,
    reports,
    webhooks,
)
from paycore.http.routers import settings as tenant_settings
from paycore.http.routing import JsonRoute, add_routes, assert_json_routes
from paycore.keyring import Keyring, KeyringSource
from paycore.monitoring import service as monitoring
from paycore.processor.port import Processor

ROUTERS = tuple(
    module.router
    for module in (
        health,
        credits,
        ledger,
        payments,
        refunds,
        disputes,
        payouts,
        reconciliation,
        reports,
        events,
        audit,
        webhooks,
        tenant_settings,
        processor_webhooks,
        docs,
    )
)


class PaycoreApp(FastAPI):
    """FastAPI with the request id, latency and access-line layer outside everything,
    Starlette's own error middleware included, so that every answer is counted and logged; and,
    outside that, the one pass of the requests the thin edges serve (`http/lean.py`)."""

    def build_middleware_stack(self) -> ASGIApp:
        full = RequestContext(super().build_middleware_stack(), self.state.metrics)
        if not self.state.lean_edges or self.debug:
            return full
        # Ahead of it all: the money requests' one pass (http/lean.py), built from the routes
        # as they stand when the first request comes.
        settings: Settings = self.state.settings
        guard = ExposureGuard(full, auth=self.state.auth, webhook_secret=settings.processor_webhook_secret)
        return LeanDispatch(full, self, guard, self.state.metrics, self.state.database, settings.body_bytes_max)


def schedules(settings: Settings) -> monitoring.Schedules:
    """The worker settings that worker lag is measured against."""
    return monitoring.Schedules(
        invariants_interval_ms=settings.invariants_interval_ms,
        reconcile_delay_ms=settings.reconcile_delay_ms,
        reconcile_lookback_days=settings.reconcile_lookback_days,
    )


def create_app(
    settings: Settings | None = None,
    database: Database | None = None,
    processor: Processor | None = None,
    keyring: Keyring | None = None,
) -> FastAPI:
    """`processor` defaults to the HTTP transport to `settings.processor_url`; `keyring` to
    PAYCORE_SECRETS_KEY's, or in local mode the local key file's, loaded on first use
    (`app.state.keyring.get()`, which the entry points call before serving: ADR 0018)."""
    settings = settings or Settings.from_env()
    database = database or Database(settings)
    if processor is None:
        from paycore.processor.http_transport import HttpTransport

        processor = HttpTransport(settings.processor_url, timeout_ms=settings.processor_timeout_ms)
    app = PaycoreApp(
        title="paycore",
        version=paycore.__version__,
        description=openapi.DESCRIPTION,
        # A trailing slash is a 404, never a redirect: Starlette's redirect is built from the
        # request's Host header, before authentication, and a 307 makes a client resend its body.
        redirect_slashes=False,
        docs_url=None,  # served from this server, not a CDN (http/docs.py)
        redoc_url=None,
    )
    app.router.route_class = JsonRoute  # for a route added to the app itself
    app.state.settings = settings
    app.state.database = database
    app.state.processor = processor
    app.state.auth = AuthState(database)
    app.state.keyring = KeyringSource(
        settings, local_mode=lambda: not app.state.auth.is_auth_required(), keyring=keyring
    )
    app.state.schedules = schedules(settings)
    # False serves the money requests through the full stack too (the equivalence tests, the bench).
    app.state.lean_edges = True
    app.state.metrics = Metrics(database, app.state.schedules)
    errors.install(app)
    add_routes(app, *ROUTERS)
    # The thin edge (ADR 0026): matched before the FastAPI route of its path and method, which
    # stays for the OpenAPI document and answers every body the edge does not read itself.
    app.router.routes.insert(0, money_credits.ROUTE)
    app.router.routes.insert(0, money_transfers.ROUTE)
    app.router.routes.insert(0, money_batches.ROUTE)
    app.router.routes.insert(0, money_transfer_operations.POST_ROUTE)
    app.router.routes.insert(0, money_transfer_operations.VOID_ROUTE)
    app.router.routes.insert(0, money_transfer_operations.REVERSE_ROUTE)
    app.router.routes.insert(0, money_payments.ROUTE)
    app.router.routes.insert(0, money_payment_operations.CAPTURE_ROUTE)
    app.router.routes.insert(0, money_payment_operations.CANCEL_ROUTE)
    app.router.routes.insert(0, money_refunds.ROUTE)
    app.router.routes.insert(0, money_payouts.ROUTE)
    app.router.routes.insert(0, money_payouts.CANCEL_ROUTE)
    app.router.routes.insert(0, money_webhooks.ROUTE)
    console.install(app, settings)
    openapi.install(app, settings)
    assert_json_routes(app)
    # Innermost: it sees every answer of the app, its error handlers' included.
    app.add_middleware(RefusalAudit, database=database)
    app.add_middleware(BodyLimit, body_bytes_max=settings.body_bytes_max)
    # Outermost of the added middleware (inside RequestContext, so a refusal still gets its
    # request id and access line): a request that must not be served here is refused before
    # anything else runs.
    app.add_middleware(ExposureGuard, auth=app.state.auth, webhook_secret=settings.processor_webhook_secret)
    return app
