"""/healthz, /readyz and /metrics (SPEC §12)."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ok", "database": "ok", "migrations": "current"}


def test_metrics_label_requests_by_route_template(client: TestClient) -> None:
    client.get("/v1/payments/pay_missing")
    client.get("/v1/payments")
    text = client.get("/metrics").text
    assert 'route="/v1/payments/{payment_id}",status="404"' in text
    assert 'route="/v1/payments",status="200"' in text
    assert "pay_missing" not in text  # ids never become labels
    assert 'paycore_in_doubt_items{kind="payment"} 0.0' in text
    assert 'paycore_in_doubt_oldest_age_seconds{kind="payment"} 0.0' in text
