"""The reconciliation HTTP API (issue 20), on both databases, over breaks the real `reconcile()`
found in the sandbox's real report, made wrong where a test needs a break: runs as a tenant sees
them (its own counts only), breaks with their filters and cursor pages, tenant isolation,
resolving a break under an Idempotency-Key, and a break in its payment's events."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from paycore.audit import service as audit
from paycore.kit import clock
from paycore.reconciliation import queries as reconciliation_queries
from paycore.reconciliation import service as reconciliation
from paycore.reconciliation import states
from paycore.reconciliation.errors import BreakNotOpen
from paycore.reconciliation.report import HEADER
from tests.integration.payments.conftest import Env
from tests.integration.reconciliation.test_reconcile import changed, today

TENANT = "default"
OTHER = "other"
RUN_FIELDS = {"id", "object", "day", "source", "status", "report_sha256", "breaks", "created_at", "finished_at"}
BREAK_FIELDS = {
    "id", "object", "type", "status", "day", "run_id", "object_type", "object_id", "object_status", "line_number",
    "line", "detail", "resolution", "note", "resolved_by", "resolved_at", "created_at",
}  # fmt: skip
RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
_keys = itertools.count(1)


@pytest.fixture
def transport() -> str:
    return "inprocess"


def pay(env: Env, tenant: str, *, token: str = "tok_ok", amount_minor: int = 2500) -> dict[str, Any]:
    as_tenant = {"Paycore-Tenant": tenant}
    body = {"code": f"m-{token}-{amount_minor}", "currency": "USD", "normal_balance": "credit"}
    account = env.client.post("/v1/accounts", json=body, headers={**as_tenant, "Idempotency-Key": body["code"]})
    assert account.status_code in (200, 201), account.text
    payment = {
        "amount_minor": amount_minor,
        "currency": "USD",
        "source": {"type": "card", "token": token},
        "destination_account": account.json()["id"],
    }
    response = env.client.post(
        "/v1/payments", json=payment, headers={**as_tenant, "Idempotency-Key": f"pay-{next(_keys)}"}
    )
    assert response.status_code in (201, 402), response.text
    return dict(response.json())


def get(env: Env, path: str, tenant: str = TENANT, **params: Any) -> Any:
    return env.client.get(path, params=params, headers={"Paycore-Tenant": tenant})


def resolve(env: Env, break_id: str, body: dict[str, Any], key: str | None, tenant: str = TENANT) -> Any:
    headers = {"Paycore-Tenant": tenant} | ({} if key is None else {"Idempotency-Key": key})
    return env.client.post(f"/v1/reconciliation/breaks/{break_id}/resolve", json=body, headers=headers)


def wrong_report(env: Env) -> dict[str, Any]:
    """Payments of two tenants, and today's report wrong about three of them: this tenant gets an
    amount_mismatch, a status_mismatch and a missing_in_paycore; the other one amount_mismatch."""
    off = pay(env, TENANT)
    declined = pay(env, TENANT, token="tok_declined", amount_minor=700)
    theirs = pay(env, OTHER, amount_minor=900)
    lines = list(env.processor.settlement_report(today()))
    lines = changed(lines, off["id"], amount_minor="2400")
    lines = changed(lines, declined["id"], status="succeeded")
    lines = changed(lines, theirs["id"], amount_minor="901")
    unknown = f"charge,pay_NOTOURS,ch_NOTOURS,{TENANT},5000,175,USD,succeeded,{today()}T10:00:00.000000Z,,\r\n"
    summary = reconciliation.reconcile(env.database, [*lines, unknown])
    assert dict(summary.breaks) == {"amount_mismatch": 2, "status_mismatch": 1, "missing_in_paycore": 1}
    return {"run_id": summary.run_id, "off": off, "declined": declined, "theirs": theirs, "lines": lines}


def breaks_of(env: Env, tenant: str = TENANT, **params: Any) -> list[dict[str, Any]]:
    response = get(env, "/v1/reconciliation/breaks", tenant, **params)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def one_break(env: Env, break_type: str, tenant: str = TENANT) -> dict[str, Any]:
    (found,) = breaks_of(env, tenant, type=break_type)
    return found


# --- runs ------------------------------------------------------------------------------------


def test_a_run_shows_each_tenant_only_its_own_breaks_and_no_volumes(env: Env) -> None:
    run_id = wrong_report(env)["run_id"]

    ours = get(env, "/v1/reconciliation/runs").json()
    theirs = get(env, f"/v1/reconciliation/runs/{run_id}", OTHER).json()
    nobody = get(env, f"/v1/reconciliation/runs/{run_id}", "nobody").json()

    assert (ours["object"], ours["has_more"], len(ours["data"])) == ("list", False, 1)
    (run,) = ours["data"]
    assert set(run) == RUN_FIELDS  # lines read, matched, resolved: every tenant's volume, not shown
    assert (run["id"], run["object"], run["day"], run["source"], run["status"]) == (
        run_id,
        "reconciliation_run",
        today(),
        "file",
        "completed",
    )
    assert len(run["report_sha256"]) == 64
    assert RFC3339_UTC.match(run["created_at"]) and RFC3339_UTC.match(run["finished_at"])
    assert run["breaks"] == {"amount_mismatch": 1, "missing_in_paycore": 1, "status_mismatch": 1}
    assert theirs == {**run, "breaks": {"amount_mismatch": 1}}
    assert nobody == {**run, "breaks": {}}
    assert get(env, f"/v1/reconciliation/runs/{run_id}").json() == run


def test_runs_come_in_cursor_pages_and_an_unknown_run_is_404(env: Env) -> None:
    first = wrong_report(env)
    lines = first["lines"]
    later = [reconciliation.reconcile(env.database, lines).run_id for _ in range(2)]  # re-runs: nothing new

    page = get(env, "/v1/reconciliation/runs", limit=2).json()
    rest = get(env, "/v1/reconciliation/runs", limit=2, starting_after=page["data"][-1]["id"]).json()

    assert [run["id"] for run in page["data"]] == [first["run_id"], later[0]] and page["has_more"] is True
    assert [run["id"] for run in rest["data"]] == [later[1]] and rest["has_more"] is False
    assert [run["breaks"] for run in rest["data"]] == [{}]
    missing = get(env, "/v1/reconciliation/runs/rcn_01NOSUCHRUN000000000000000")
    assert (missing.status_code, missing.json()["error"]) == (404, "run_not_found")
    cursor = get(env, "/v1/reconciliation/runs", starting_after="rcn_01NOSUCHRUN000000000000000")
    assert (cursor.status_code, cursor.json()["error"]) == (400, "invalid_starting_after")


# --- breaks ----------------------------------------------------------------------------------


def test_a_break_carries_its_evidence(env: Env) -> None:
    made = wrong_report(env)

    found = one_break(env, "status_mismatch")

    assert set(found) == BREAK_FIELDS
    assert get(env, f"/v1/reconciliation/breaks/{found['id']}").json() == found
    assert found["id"].startswith("brk_") and found["object"] == "reconciliation_break"
    assert (found["status"], found["day"], found["run_id"]) == ("open", today(), made["run_id"])
    assert (found["object_type"], found["object_id"], found["object_status"]) == (
        "payment",
        made["declined"]["id"],
        "failed",
    )
    assert found["line_number"] == 3 and found["line"][HEADER.index("status")] == "succeeded"
    assert found["line"][HEADER.index("request_id")] == made["declined"]["id"]
    assert all(isinstance(field, str) for field in found["line"]) and len(found["line"]) == len(HEADER)
    assert (found["resolution"], found["note"], found["resolved_by"], found["resolved_at"]) == (None,) * 4
    assert RFC3339_UTC.match(found["created_at"])
    unknown = one_break(env, "missing_in_paycore")
    assert (unknown["object_type"], unknown["object_id"], unknown["object_status"]) == (None, None, None)


def test_breaks_filter_by_status_and_type_and_come_in_cursor_pages(env: Env) -> None:
    wrong_report(env)

    every = breaks_of(env)
    first = get(env, "/v1/reconciliation/breaks", limit=2).json()
    rest = get(env, "/v1/reconciliation/breaks", limit=2, starting_after=first["data"][-1]["id"]).json()

    assert sorted(found["type"] for found in every) == ["amount_mismatch", "missing_in_paycore", "status_mismatch"]
    assert [found["id"] for found in every] == sorted(found["id"] for found in every)  # oldest first
    assert first["has_more"] is True and rest["has_more"] is False
    assert [found["id"] for found in first["data"] + rest["data"]] == [found["id"] for found in every]
    assert breaks_of(env, status="open") == every
    assert breaks_of(env, status="resolved") == [] and breaks_of(env, status="superseded") == []
    assert [found["type"] for found in breaks_of(env, type="amount_mismatch")] == ["amount_mismatch"]
    assert breaks_of(env, status="open", type="fee_mismatch") == []


@pytest.mark.parametrize(
    ("params", "code", "param"),
    [
        ({"status": "closed"}, "invalid_request", "status"),
        ({"type": "amount_wrong"}, "invalid_request", "type"),
        ({"limit": 0}, "invalid_request", "limit"),
        ({"starting_after": "brk_01NOSUCHBREAK00000000000000"}, "invalid_starting_after", "starting_after"),
    ],
)
def test_a_bad_filter_or_cursor_is_400(env: Env, params: dict[str, Any], code: str, param: str) -> None:
    response = get(env, "/v1/reconciliation/breaks", **params)

    assert (response.status_code, response.json()["error"], response.json().get("param")) == (400, code, param)


def test_another_tenant_sees_none_of_the_breaks(env: Env) -> None:
    wrong_report(env)
    ours = one_break(env, "status_mismatch")
    theirs = one_break(env, "amount_mismatch", OTHER)

    assert breaks_of(env, "nobody") == []
    assert [found["id"] for found in breaks_of(env, OTHER)] == [theirs["id"]]
    for tenant, found in ((OTHER, ours), (TENANT, theirs)):
        shown = get(env, f"/v1/reconciliation/breaks/{found['id']}", tenant)
        assert (shown.status_code, shown.json()["error"]) == (404, "break_not_found")
        resolved = resolve(env, found["id"], {"resolution": "accepted"}, f"steal-{tenant}", tenant)
        assert (resolved.status_code, resolved.json()["error"]) == (404, "break_not_found")
    cursor = get(env, "/v1/reconciliation/breaks", OTHER, starting_after=ours["id"])
    assert (cursor.status_code, cursor.json()["error"]) == (400, "invalid_starting_after")
    assert one_break(env, "status_mismatch")["status"] == "open"


# --- resolving -------------------------------------------------------------------------------


def test_resolving_a_break_records_who_when_and_why_and_a_replay_changes_nothing(env: Env) -> None:
    wrong_report(env)
    found = one_break(env, "amount_mismatch")
    body = {"resolution": "processor_corrected", "note": "the processor's corrected file of the 26th has 2500"}
    before = clock.now_us()

    response = resolve(env, found["id"], body, "resolve-1")

    assert response.status_code == 200, response.text
    resolved = response.json()
    assert resolved == {
        **found,
        "status": "resolved",
        "resolution": "processor_corrected",
        "note": body["note"],
        "resolved_by": "local",
        "resolved_at": resolved["resolved_at"],
    }
    assert clock.parse_rfc3339(resolved["resolved_at"]) >= before
    assert get(env, f"/v1/reconciliation/breaks/{found['id']}").json() == resolved
    assert [item["id"] for item in breaks_of(env, status="resolved")] == [found["id"]]
    assert found["id"] not in [item["id"] for item in breaks_of(env, status="open")]
    replay = resolve(env, found["id"], body, "resolve-1")
    assert (replay.status_code, replay.json(), replay.headers["idempotent-replayed"]) == (200, resolved, "true")
    other_body = resolve(env, found["id"], {"resolution": "written_off"}, "resolve-1")
    assert (other_body.status_code, other_body.json()["error"]) == (409, "idempotency_key_reused")
    again = resolve(env, found["id"], {"resolution": "accepted"}, "resolve-2")
    assert (again.status_code, again.json()["error"], again.json()["status"]) == (409, "break_not_open", "resolved")
    assert get(env, f"/v1/reconciliation/breaks/{found['id']}").json() == resolved


@pytest.mark.parametrize(
    ("body", "key", "code", "param"),
    [
        ({"resolution": "forgiven"}, "bad-1", "invalid_request", "resolution"),
        ({}, "bad-2", "invalid_request", "resolution"),
        ({"resolution": "accepted", "note": "x" * (states.NOTE_CHARS_MAX + 1)}, "bad-3", "invalid_request", "note"),
        ({"resolution": "accepted", "note": ""}, "bad-4", "invalid_request", "note"),
        ({"resolution": "accepted", "by": "me"}, "bad-5", "invalid_request", "by"),
        ({"resolution": "accepted"}, None, "idempotency_key_required", None),
    ],
)
def test_a_bad_resolve_request_is_400_and_changes_nothing(
    env: Env, body: dict[str, Any], key: str | None, code: str, param: str | None
) -> None:
    wrong_report(env)
    found = one_break(env, "status_mismatch")

    response = resolve(env, found["id"], body, key)

    assert (response.status_code, response.json()["error"], response.json().get("param")) == (400, code, param)
    assert get(env, f"/v1/reconciliation/breaks/{found['id']}").json() == found
    if key is not None:  # a 400 is not recorded: the key still works for a good request
        assert resolve(env, found["id"], {"resolution": "accepted"}, key).status_code == 200


def test_a_note_of_the_maximum_length_is_kept_whole(env: Env) -> None:
    wrong_report(env)
    found = one_break(env, "missing_in_paycore")
    note = "é" * states.NOTE_CHARS_MAX

    response = resolve(env, found["id"], {"resolution": "written_off", "note": note}, "long-note")

    assert (response.status_code, response.json()["note"]) == (200, note)


def test_a_stale_read_loses_to_the_resolution_that_committed_first(env: Env) -> None:
    """Two people resolve the same break: each read it open; the compare-and-set lets one win and
    tells the other the status it lost to."""
    wrong_report(env)
    found = one_break(env, "status_mismatch")
    with env.database.read() as connection:
        stale = reconciliation_queries.get_break(connection, TENANT, found["id"])
    assert resolve(env, found["id"], {"resolution": "accepted"}, "first").status_code == 200

    def second(connection: Any) -> None:
        states.move(connection, stale, states.RESOLVED, cause="adjusted", actor="local", now_us=clock.now_us())

    with pytest.raises(BreakNotOpen) as lost:
        env.database.transaction(second)
    assert lost.value.status == "resolved"
    assert get(env, f"/v1/reconciliation/breaks/{found['id']}").json()["resolution"] == "accepted"


# --- events ----------------------------------------------------------------------------------


def test_a_break_shows_in_its_payments_events_opened_then_resolved(env: Env) -> None:
    made = wrong_report(env)
    payment_id = made["declined"]["id"]
    history_before = get(env, f"/v1/payments/{payment_id}").json()["history"]
    found = one_break(env, "status_mismatch")
    resolve(env, found["id"], {"resolution": "adjusted", "note": "booked by hand"}, "events-1")

    events = get(env, f"/v1/payments/{payment_id}/events").json()["data"]

    ours = [event for event in events if event["type"].startswith("reconciliation.")]
    assert [(e["type"], e["kind"], e["object_type"], e["object_id"]) for e in ours] == [
        ("reconciliation.break_opened", "note", "payment", payment_id),
        ("reconciliation.break_resolved", "note", "payment", payment_id),
    ]
    opened, resolved = ours
    assert (opened["cause"], opened["actor"]) == ("settlement_report", f"reconcile:{made['run_id']}")
    assert opened["data"]["break_id"] == found["id"] and opened["data"]["break_type"] == "status_mismatch"
    assert (opened["data"]["from"], opened["data"]["to"], opened["data"]["run_id"]) == (None, "open", made["run_id"])
    assert (resolved["cause"], resolved["actor"]) == ("adjusted", "local")
    assert resolved["data"]["request_id"].startswith("req_")  # the request's access line
    assert {key: resolved["data"][key] for key in ("break_id", "from", "to", "resolution", "note")} == {
        "break_id": found["id"],
        "from": "open",
        "to": "resolved",
        "resolution": "adjusted",
        "note": "booked by hand",
    }
    assert get(env, f"/v1/payments/{payment_id}").json()["history"] == history_before  # its own changes only
    published = get(env, "/v1/events", object_id=payment_id, limit=100).json()["data"]  # what webhooks deliver
    ours = [event for event in published if event["type"].startswith("reconciliation.")]
    assert [(e["type"], e["sequence"], e["data"]["id"], e["data"]["status"]) for e in ours] == [
        ("reconciliation.break_opened", 1, found["id"], "open"),
        ("reconciliation.break_resolved", 2, found["id"], "resolved"),
    ]
    assert ours[1]["data"]["resolution"] == "adjusted"


def test_a_break_that_names_nothing_is_recorded_on_itself(env: Env) -> None:
    wrong_report(env)
    found = one_break(env, "missing_in_paycore")

    with env.database.read() as connection:
        events = audit.events_of(connection, TENANT, found["id"], limit=10)

    assert [(event.type, event.object_type, event.data["to"]) for event in events] == [
        ("reconciliation.break_opened", "reconciliation_break", "open")
    ]


def test_a_rerun_of_the_same_report_opens_no_event_again(env: Env) -> None:
    made = wrong_report(env)
    payment_id = made["declined"]["id"]

    reconciliation.reconcile(env.database, made["lines"])

    types = [event["type"] for event in get(env, f"/v1/payments/{payment_id}/events").json()["data"]]
    assert types.count("reconciliation.break_opened") == 1
