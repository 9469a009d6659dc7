"""The FastAPI application: routers, error handlers, the body bound, metrics."""

from __future__ import annotations

from fastapi import FastAPI

import paycore
from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http import errors, openapi
from paycore.http.context import AuthState
from paycore.http.metrics import Metrics, RequestLatency
from paycore.http.middleware import BodyLimit
from paycore.http.routers import credits, events, health, ledger, payments, payouts, refunds, reports, webhooks
from paycore.http.routers import settings as tenant_settings
from paycore.processor.port import Processor


def create_app(
    settings: Settings | None = None, database: Database | None = None, processor: Processor | None = None
) -> FastAPI:
    """`processor` defaults to the HTTP transport to `settings.processor_url`."""
    settings = settings or Settings.from_env()
    database = database or Database(settings)
    if processor is None:
        from paycore.processor.http_transport import HttpTransport

        processor = HttpTransport(settings.processor_url, timeout_ms=settings.processor_timeout_ms)
    app = FastAPI(title="paycore", version=paycore.__version__, description=openapi.DESCRIPTION)
    app.state.settings = settings
    app.state.database = database
    app.state.processor = processor
    app.state.auth = AuthState(database)
    app.state.metrics = Metrics(database)
    errors.install(app)
    for router in (health, credits, ledger, payments, refunds, payouts, reports, events, tenant_settings, webhooks):
        app.include_router(router.router)
    openapi.install(app, settings)
    app.add_middleware(BodyLimit, body_bytes_max=settings.body_bytes_max)
    app.add_middleware(RequestLatency, metrics=app.state.metrics)
    return app
