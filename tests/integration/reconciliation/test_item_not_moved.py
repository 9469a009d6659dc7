"""A settlement report's line whose proof cannot be applied to its item (the item's hold was
resolved behind its flow's back: `tests/support/tamper.py`) is an `item_not_moved` break; the
day finishes, every other tenant's line is applied, and `paycore reconcile --day` exits 0 with
its summary, no traceback (lifecycle/faults.py, docs/reconciliation.md). On SQLite and
PostgreSQL, with the processor behind HTTP."""

from __future__ import annotations

import pytest

from paycore.payments import service as payments
from paycore.processor.http_transport import HttpTransport
from paycore.reconciliation import queries as reconciliation_queries
from tests.integration.lifecycle.support import TENANTS, account, load, pay, tenants
from tests.integration.ops.conftest import Console, console
from tests.integration.reconciliation.test_reconcile import today
from tests.integration.reconciliation.test_scheduled_job import run_cli, runs
from tests.support import tamper

__all__ = ["console"]  # the console's fixture: tenants with API keys, people signed in


@pytest.mark.parametrize("transport", ["http"])
def test_a_day_finishes_past_a_line_whose_item_cannot_be_moved(console: Console) -> None:
    env = console.env
    keys = tenants(console)
    merchants = {tenant: account(env.client, keys[tenant]) for tenant in TENANTS}
    env.faults({"fault": "drop_response", "next_n": 1 + len(TENANTS), "ops": ["charge"]})
    poisoned = pay(env.client, keys["acme"], merchants["acme"], 700)
    others = [(tenant, pay(env.client, keys[tenant], merchants[tenant], 1_500)) for tenant in TENANTS]
    assert {made["status"] for made in [poisoned, *(made for _, made in others)]} == {"in_doubt"}
    transfer_id = load(console, payments.MACHINE, "acme", poisoned["id"]).transfer_id
    tamper.void_hold(env.database, "acme", transfer_id)
    assert isinstance(env.processor, HttpTransport)
    processor_url = env.processor.base_url

    result = run_cli(env, "--day", today(), processor_url=processor_url)

    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert f"lines read {1 + len(TENANTS)}, matched {len(TENANTS)}, resolved {len(TENANTS)}" in result.stdout
    assert "new breaks: item_not_moved 1" in result.stdout
    assert runs(env) == [(today(), "processor", "completed")]
    for tenant, payment in others:
        assert load(console, payments.MACHINE, tenant, payment["id"]).status == "succeeded", tenant
    assert load(console, payments.MACHINE, "acme", poisoned["id"]).status == "in_doubt"  # as the evidence left it
    with env.database.read() as connection:
        found = reconciliation_queries.breaks_of(connection, "acme")
    [stored] = found
    assert (stored["type"], stored["object_id"], stored["object_status"]) == (
        "item_not_moved",
        poisoned["id"],
        "in_doubt",
    )
    assert "succeeded" in stored["detail"] and "transfer_not_pending" in stored["detail"]
    metrics = env.client.get("/metrics").text
    assert 'paycore_reconciliation_breaks{status="open",type="item_not_moved"} 1.0' in metrics

    browser = console.signed_in("alice")
    listed = browser.get("/ops/reconciliation?type=item_not_moved")
    assert listed.status_code == 200 and stored["id"] in listed.text
    page = browser.get(f"/ops/payments/{poisoned['id']}")
    assert page.status_code == 200 and "item_not_moved" in page.text

    again = run_cli(env, "--day", today(), processor_url=processor_url)  # met again, not stored twice
    assert again.exit_code == 0, again.output
    assert "new breaks: none" in again.stdout
