"""The FastAPI application: routers, error handlers, the body bound."""

from __future__ import annotations

from fastapi import FastAPI

import paycore
from paycore.config import Settings
from paycore.db.engine import Database
from paycore.http import errors
from paycore.http.context import AuthState
from paycore.http.middleware import BodyLimit
from paycore.http.routers import credits, health, ledger


def create_app(settings: Settings | None = None, database: Database | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    database = database or Database(settings)
    app = FastAPI(
        title="paycore",
        version=paycore.__version__,
        description="A payments core on an append-only double-entry ledger. Amounts are integer minor units.",
    )
    app.state.settings = settings
    app.state.database = database
    app.state.auth = AuthState(database)
    errors.install(app)
    app.include_router(health.router)
    app.include_router(credits.router)
    app.include_router(ledger.router)
    app.add_middleware(BodyLimit, body_bytes_max=settings.body_bytes_max)
    return app
