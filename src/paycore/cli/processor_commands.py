"""`paycore processor ...`: the sandbox processor as its own service (SPEC §9).

`paycore processor serve` runs the sandbox's HTTP API with uvicorn and, on a background
thread, finalises late charges and refunds and delivers webhooks to paycore. No business
logic here: everything is `paycore_sandbox`.
"""

from __future__ import annotations

import logging

import typer

from paycore_sandbox.limits import DEFAULT_DATABASE_URL, DEFAULT_WEBHOOK_SECRET, DEFAULT_WEBHOOK_URL

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
) -> None:
    """Run the sandbox processor's HTTP API and its webhook deliverer."""
    import uvicorn

    from paycore_sandbox.http import create_app
    from paycore_sandbox.service import Sandbox
    from paycore_sandbox.webhooks import http_sink

    if not webhook_secret:
        raise typer.BadParameter("the webhook secret must not be empty", param_hint="--webhook-secret")
    try:
        sink = http_sink(webhook_url)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--webhook-url") from error
    sandbox = Sandbox.open(database_url, webhook_secret=webhook_secret)
    background = sandbox.start_background(sink, BACKGROUND_INTERVAL_MS)
    log.info(
        "sandbox processor on http://%s:%d (database %s, webhooks to %s)",
        host,
        port,
        sandbox.database.dialect,
        webhook_url,
        extra={"event": "processor_started", "host": host, "port": port},
    )
    try:
        # Logging is configured by the `paycore` callback (JSON lines); uvicorn's go through it.
        uvicorn.run(
            create_app(sandbox, sink), host=host, port=port, log_level="warning", log_config=None, access_log=False
        )
    finally:
        background.stop()
        sandbox.close()
