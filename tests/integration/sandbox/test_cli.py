"""`paycore processor serve`: the sandbox as its own process, delivering signed webhooks."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from typer.testing import CliRunner

from paycore.cli.processor_commands import app
from paycore.kit.signing import SIGNATURE_HEADER, verify
from paycore.processor.http_transport import HttpTransport
from paycore.processor.port import ChargeRequest, ProcessorUnreachable
from tests.integration.sandbox.test_webhooks import Receiver

START_TIMEOUT_S = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_documents_its_options() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})

    assert result.exit_code == 0
    for option in ("--host", "--port", "--database-url", "--webhook-url", "--webhook-secret"):
        assert option in result.output
    assert "PAYCORE_SANDBOX_DATABASE_URL" in result.output


def test_serve_refuses_a_webhook_url_it_cannot_use(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--database-url", f"sqlite:///{tmp_path / 's.db'}", "--webhook-url", "mailto:x"]
    )

    assert result.exit_code == 2


def test_serve_answers_charges_and_delivers_signed_webhooks(tmp_path: Path) -> None:
    Receiver.received = []
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    port = free_port()
    environment = {
        **os.environ,
        "PAYCORE_SANDBOX_DATABASE_URL": f"sqlite:///{tmp_path / 'sandbox.db'}",
        "PAYCORE_SANDBOX_WEBHOOK_URL": f"http://127.0.0.1:{receiver.server_address[1]}/v1/webhooks/processor",
        "PAYCORE_PROCESSOR_WEBHOOK_SECRET": "whsec_from_env",
    }
    command = [sys.executable, "-c", "from paycore.cli.processor_commands import app; app()"]
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([*command, "serve", "--port", str(port)], env=environment, stdout=log, stderr=log)
    try:
        transport = HttpTransport(f"http://127.0.0.1:{port}", timeout_ms=2_000)
        result = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while result is None and time.monotonic() < deadline and process.poll() is None:
            try:
                result = transport.charge(ChargeRequest("pay_1", "merchant_1", 100, "USD", "tok_ok"))
            except ProcessorUnreachable:
                time.sleep(0.05)
        assert result is not None and result.status == "succeeded", log_path.read_text()

        while not Receiver.received and time.monotonic() < deadline:
            time.sleep(0.02)
        ((body, headers),) = Receiver.received
        assert verify("whsec_from_env", headers[SIGNATURE_HEADER], body, now_s=int(time.time())) > 0
    finally:
        process.terminate()
        process.wait(10)
        receiver.shutdown()
        receiver.server_close()
