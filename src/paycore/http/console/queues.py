"""The console's work queues: everything in doubt, oldest first; the items a worker
round could not move, oldest fault first; refunds waiting for a second person; reconciliation
runs and breaks, a break beside the object it names."""

from __future__ import annotations

import json
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from paycore.audit import service as audit
from paycore.disputes import approvals as dispute_approvals
from paycore.disputes import service as disputes
from paycore.disputes import states as dispute_states
from paycore.http.console import render, scope
from paycore.http.console.scope import BY_NAME, KINDS, BadFilter
from paycore.http.console.session import principal
from paycore.http.routing import JsonRoute
from paycore.invariants import service as invariants
from paycore.kit.clock import now_us
from paycore.kit.errors import InvalidRequest
from paycore.lifecycle.store import Search
from paycore.manual_resolutions import service as resolutions
from paycore.monitoring import service as operations
from paycore.operators.types import Principal
from paycore.reconciliation import queries as reconciliation_queries
from paycore.reconciliation.report import HEADER
from paycore.refunds import service as refunds
from paycore.tenants import settings as tenant_settings

router = APIRouter(prefix="/ops", include_in_schema=False, route_class=JsonRoute)
Who = Annotated[Principal, Depends(principal)]
IN_DOUBT_ROWS: Final = 100  # per kind
FAULTED_ROWS: Final = 100  # per kind
RUNS_SHOWN: Final = 20
DISPUTES_SHOWN: Final = 200  # disputes taking an answer, read for their accept requests
VIOLATIONS_SHOWN: Final = 200
RESOLUTIONS: Final = ("accepted", "adjusted", "processor_corrected", "written_off")


@router.get("/in-doubt")
def in_doubt(request: Request, who: Who) -> Response:
    """Every kind in doubt, oldest first: age, attempts, next attempt, the evidence so far, and
    what a person may do (ask again now; resolve by hand once eligible)."""
    now = now_us()
    try:
        tenant_id = scope.tenant_of(who, request.query_params.get("tenant"))
    except BadFilter as error:
        return render.page(request, "refused.html", 400, heading="Refused", message=str(error), back="/ops/in-doubt")
    queues: dict[str, list[dict[str, Any]]] = {}
    with request.app.state.database.read() as connection:
        proposals = {
            found.object_id: found
            for found in resolutions.page(
                connection, tenant_id=tenant_id, status="proposed", starting_after=None, limit=500
            )
        }
        windows: dict[str, int] = {}
        for kind in KINDS.values():
            search = Search(tenant_id=tenant_id, statuses=("in_doubt",), in_doubt_first=True, limit=IN_DOUBT_ROWS)
            items = kind.machine.search(connection, search)
            evidence = audit.calls_summary(connection, [(item.tenant_id, item.id) for item in items])
            rows = []
            for item in items:
                if item.tenant_id not in windows:
                    windows[item.tenant_id] = tenant_settings.get(
                        connection, item.tenant_id
                    ).manual_resolution_after_seconds
                waited_s = max(0, now - (item.in_doubt_since_us or now)) // 1_000_000
                rows.append(
                    {
                        "item": item,
                        "evidence": evidence.get((item.tenant_id, item.id)),
                        "proposal": proposals.get(item.id),
                        "past_window": waited_s >= windows[item.tenant_id],
                    }
                )
            queues[kind.name] = rows
    return render.page(request, "in_doubt.html", queues=queues, kinds=KINDS, now=now, tenant=tenant_id or "")


@router.get("/faults")
def faulted(request: Request, who: Who) -> Response:
    """Every kind's items a worker round could not move, oldest fault first: the fault, the
    status it left them in, attempts and the next one (none: waiting for a person); retry now."""
    try:
        tenant_id = scope.tenant_of(who, request.query_params.get("tenant"))
    except BadFilter as error:
        return render.page(request, "refused.html", 400, heading="Refused", message=str(error), back="/ops/faults")
    with request.app.state.database.read() as connection:
        found = operations.faulted(connection, tenant_id=tenant_id, limit=FAULTED_ROWS)
    queues = {kind.name: found[kind.name] for kind in KINDS.values()}
    return render.page(request, "faults.html", queues=queues, kinds=KINDS, now=now_us(), tenant=tenant_id or "")


@router.get("/approvals")
def approvals(request: Request, who: Who) -> Response:
    """Refunds waiting for an approver, oldest first, with who asked and when; and the disputes
    whose accept waits for one, the nearest evidence deadline first."""
    now = now_us()
    with request.app.state.database.read() as connection:
        search = Search(tenant_id=who.scope, statuses=("requires_approval",), limit=200)
        waiting = list(reversed(refunds.MACHINE.search(connection, search)))
        rows = [{"refund": refund, "requester": refunds.requested_by(connection, refund)} for refund in waiting]
        answering = disputes.by_due(
            connection, tenant_id=who.scope, statuses=tuple(dispute_states.OPEN), after=None, limit=DISPUTES_SHOWN
        )
        asked = dispute_approvals.open_requests(connection, answering)
    accepts = [
        {"dispute": dispute, "request": asked[(dispute.tenant_id, dispute.id)]}
        for dispute in answering
        if (dispute.tenant_id, dispute.id) in asked
    ]
    return render.page(request, "approvals.html", rows=rows, accepts=accepts, now=now)


@router.get("/invariants")
def invariants_page(request: Request, who: Who) -> Response:
    """What the invariant checks found broken, newest first: the check, the object (linked),
    the figures. A finding stays listed after the books are corrected: it is what was found."""
    with request.app.state.database.read() as connection:
        found = invariants.recent_violations(connection, tenant_id=who.scope, limit=VIOLATIONS_SHOWN)
    return render.page(request, "invariants.html", found=found, now=now_us())


@router.get("/reconciliation")
def reconciliation_page(request: Request, who: Who) -> Response:
    """Runs, open breaks by type and age, and the breaks themselves (filter by status and type)."""
    now = now_us()
    status = request.query_params.get("status", "open") or None
    break_type = request.query_params.get("type") or None
    after = request.query_params.get("starting_after") or None
    try:
        with request.app.state.database.read() as connection:
            runs = reconciliation_queries.recent_runs(connection, limit=RUNS_SHOWN)
            summary = reconciliation_queries.open_breaks_by_type(connection, tenant_id=who.scope)
            found = reconciliation_queries.breaks_of_any(
                connection,
                tenant_id=who.scope,
                status=status,
                break_type=break_type,
                starting_after=after,
                limit=scope.PAGE_ROWS + 1,
            )
    except InvalidRequest as error:
        return render.page(
            request, "refused.html", 400, heading="Refused", message=error.message, back="/ops/reconciliation"
        )
    more = found[scope.PAGE_ROWS - 1].id if len(found) > scope.PAGE_ROWS else None
    return render.page(
        request,
        "reconciliation.html",
        runs=runs,
        summary=summary,
        breaks=found[: scope.PAGE_ROWS],
        more=more,
        given={"status": status or "", "type": break_type or ""},
        types=reconciliation_queries.BREAK_TYPES,
        now=now,
    )


@router.get("/reconciliation/breaks/{break_id}")
def break_page(request: Request, who: Who, break_id: str) -> Response:
    """A break's evidence (the report line or webhook as read) beside the object it names."""
    with request.app.state.database.read() as connection:
        found = reconciliation_queries.find_break(connection, break_id, tenant_id=who.scope)
        if found is None:
            message = f"No break {break_id} here."
            return render.page(
                request, "refused.html", 404, heading="No such break", message=message, back="/ops/reconciliation"
            )
        item = None
        if found.object_type in BY_NAME and found.object_id is not None:
            item = BY_NAME[found.object_type].machine.find(connection, found.tenant_id, found.object_id)
        dispute = None
        if found.object_type == "dispute" and found.object_id is not None:
            dispute = disputes.find_any(connection, found.object_id, tenant_id=found.tenant_id)
    try:
        evidence = json.loads(found.line)
    except ValueError:
        evidence = found.line
    if isinstance(evidence, list) and len(evidence) == len(HEADER):  # a report line: by column name
        evidence = dict(zip(HEADER, evidence, strict=True))
    kind = BY_NAME.get(found.object_type or "")
    return render.page(
        request,
        "break.html",
        found=found,
        item=item,
        dispute=dispute,
        kind=kind,
        evidence=evidence,
        resolutions=RESOLUTIONS,
        now=now_us(),
    )
