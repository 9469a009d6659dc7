"""`paycore processor ...`: the sandbox processor as its own service (SPEC §9).

`paycore processor serve` serves the sandbox's HTTP API with paycore's own `Server`, so it has
the HTTP limits of `paycore serve` (the same PAYCORE_HTTP_* settings and
PAYCORE_BODY_BYTES_MAX: 431, 408, 413, 503 `server_busy`) and its start-up rule: off loopback
only with an admin token, which the endpoints that change the sandbox then require
(paycore_sandbox.admin). On a background thread it finalises late charges and refunds and
delivers webhooks to paycore. No business logic here: everything is `paycore_sandbox`.
"""

from __future__ import annotations

import logging

import typer

from paycore_sandbox.limits import (
    ADMIN_TOKEN_ENV,
    DEFAULT_DATABASE_URL,
    DEFAULT_WEBHOOK_SECRET,
    DEFAULT_WEBHOOK_URL,
    admin_token_problem,
)

app = typer.Typer(help="The sandbox card processor (a separate service with its own database).")
log = logging.getLogger(__name__)
BACKGROUND_INTERVAL_MS = 200


@app.callback()
def processor() -> None:
    """The sandbox card processor (a separate service with its own database)."""


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    port: int = typer.Option(8100, help="Port to bind."),
    database_url: str = typer.Option(
        DEFAULT_DATABASE_URL, envvar="PAYCORE_SANDBOX_DATABASE_URL", help="The sandbox's own database."
    ),
    webhook_url: str = typer.Option(
        DEFAULT_WEBHOOK_URL, envvar="PAYCORE_SANDBOX_WEBHOOK_URL", help="Where webhooks are POSTed."
    ),
    webhook_secret: str = typer.Option(
        DEFAULT_WEBHOOK_SECRET,
        envvar="PAYCORE_PROCESSOR_WEBHOOK_SECRET",
        help="The secret webhooks are signed with (HMAC-SHA256).",
        show_default=False,
    ),
    admin_token: str = typer.Option(
        "",
        envvar=ADMIN_TOKEN_ENV,
        help="Required as 'Authorization: Bearer TOKEN' to change the fault plan or deliver on demand; "
        "without one the service binds loopback only.",
        show_default=False,
    ),
) -> None:
    """Run the sandbox processor's HTTP API and its webhook deliverer."""
    from paycore.cli.starting import bound_server
    from paycore.config import Settings
    from paycore.http.exposure import UnsafeBind, check_admin_bind
    from paycore_sandbox.http import create_app
    from paycore_sandbox.service import Sandbox
    from paycore_sandbox.sink import http_sink

    if not webhook_secret:
        raise typer.BadParameter("the webhook secret must not be empty", param_hint="--webhook-secret")
    token = admin_token or None  # an empty variable means none, as every PAYCORE_* setting
    if token is not None and (problem := admin_token_problem(token)) is not None:
        raise typer.BadParameter(problem, param_hint=f"--admin-token / {ADMIN_TOKEN_ENV}")
    try:
        sink = http_sink(webhook_url)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--webhook-url") from error
    try:
        check_admin_bind(host, admin_token=token)  # before the sandbox opens its database (it logs why)
    except UnsafeBind:
        raise typer.Exit(2) from None
    settings = Settings.from_env()  # the HTTP limits of `paycore serve`: PAYCORE_HTTP_*, PAYCORE_BODY_BYTES_MAX
    sandbox = Sandbox.open(database_url, webhook_secret=webhook_secret)
    background = sandbox.start_background(sink, BACKGROUND_INTERVAL_MS)
    try:
        api = create_app(sandbox, sink, admin_token=token, body_bytes_max=settings.body_bytes_max)
        server = bound_server(api, host, port, settings)
        log.info(
            "sandbox processor on http://%s:%d (database %s, webhooks to %s, admin endpoints %s)",
            host,
            port,
            sandbox.database.dialect,
            webhook_url,
            "need the admin token" if token else "open: loopback only",
            extra={"event": "processor_started", "host": host, "port": port, "admin_token": token is not None},
        )
        # Logging is configured by the `paycore` callback (JSON lines); uvicorn's go through it.
        server.serve_forever()
    finally:
        background.stop()
        sandbox.close()
        sink.close()
