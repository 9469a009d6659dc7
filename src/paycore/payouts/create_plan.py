"""A payout's creating phase (`POST /v1/payouts`), planned (ADR 0026 step 3): pure functions
from the request to the rows to write.

In: the request (its key's scope: tenant, key, fingerprint, the clock's `now_us`; and the
`NewPayout`), who asked (the actor) and caused the events (the request id), the in-transit
account's id if this process has seen it, the new ids, and how the answer is encoded. Out: a
`Plan` holding every row the reference path (the route's effect: `service.schedule` and the
`api_call` audit event, inside `idempotency.run`) writes for a payout it schedules: the key
with its answer (201), the tenant's four payout system accounts to ensure (`money.templates`),
the hold (a pending transfer: the source debited, `payouts.in_transit` credited, the source
guarded: never below its available balance) with its two entries and each account's pending
deltas, the payout `scheduled`, its birth event with its snapshot (numbered 1), and the
request's `api_call` event. And the answer, built here from the plan, never read back.

The rules of a payout request live here once (`check_request`), and the payout is made here
once (`new_payout`): `service.schedule` calls both. The checks that need rows (the source
exists, holds the payout's currency, has the funds; the totals' limits) are the write's, under
its locks. No I/O: the writers (`create_repository.py`) only send the plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paycore.audit import rows as audit_rows
from paycore.audit.rows import EventContext
from paycore.audit.service import Event
from paycore.idempotency.service import KeyScope, Outcome
from paycore.kit.clock import utc_day
from paycore.kit.errors import DomainError, InvalidAmount
from paycore.kit.money import AMOUNT_MINOR_MAX, is_amount_minor
from paycore.ledger import chart
from paycore.ledger import service as ledger
from paycore.ledger.limits import Totals
from paycore.ledger.service import AccountTemplate, EntrySpec, TransferSpec
from paycore.lifecycle import columns, recording
from paycore.payouts import lifecycle, money, schemas, states, validation
from paycore.payouts.types import NewPayout, Payout, payout_row
from paycore.payouts.validation import Beneficiary

CAUSE = "payout_scheduled"  # the cause of a payout's birth event
# The audit's name of the request (`api.payouts.schedule`); http/routers/payouts.py's SCHEDULE
# names the same operation for the reference path's event, and the data plane's rows test
# (tests/integration/payouts/test_create_data_plane.py) holds the two to each other.
OPERATION = "payouts.schedule"
STATUS_CREATED = 201
Encode = Callable[[Any], str]  # the answer's JSON, as the HTTP layer encodes it (http.errors.dumps)


@dataclass(frozen=True)
class NewIds:
    """The ids the phase may write: the system accounts' only where they are created."""

    payout_id: str
    transfer_id: str
    account_ids: tuple[str, str, str, str]  # in the order of `money.templates`
    debit_entry_id: str
    credit_entry_id: str
    birth_event_id: str
    api_call_event_id: str


@dataclass(frozen=True)
class PlannedEntry:
    """One entry of the hold, with what it adds to its account's totals (pending only)."""

    id: str
    account_id: str  # in transit's: as planned; the write uses the one it finds
    direction: str
    amount_minor: int
    delta: Totals


@dataclass(frozen=True)
class Plan:
    payout: Payout
    answer: Outcome  # the 201 and its body: stored with the key, and answered
    key_row: dict[str, Any]
    accounts: tuple[AccountTemplate, ...]  # the four payout system accounts, `money.templates`
    account_ids: tuple[str, ...]  # the ids each gets if created
    in_transit_known: bool  # this process has written to it: SQLite skips the accounts' ensure
    transfer_row: dict[str, Any]
    # the source debited (guarded), then in transit credited: the order of the hold's entries
    # on the reference path (`money.hold`).
    entries: tuple[PlannedEntry, PlannedEntry]
    payout_row: dict[str, Any]
    event_rows: tuple[dict[str, Any], dict[str, Any]]  # the birth, then the api_call

    @property
    def tenant_id(self) -> str:
        return self.payout.tenant_id

    @property
    def source_entry(self) -> PlannedEntry:
        return self.entries[0]

    @property
    def in_transit_entry(self) -> PlannedEntry:
        return self.entries[1]

    @property
    def in_transit(self) -> AccountTemplate:
        return self.accounts[in_transit_index(self.accounts)]


def in_transit_index(templates: tuple[AccountTemplate, ...] | list[AccountTemplate]) -> int:
    """Where in `money.templates` the in-transit account is."""
    return [template.code for template in templates].index(in_transit_code(templates[0].currency))


def in_transit_code(currency: str) -> str:
    return chart.code(money.IN_TRANSIT, currency)


def check_request(new: NewPayout, now_us: int) -> tuple[Beneficiary, str]:
    """The payout request's rules (the one home; `service.schedule` calls it): the beneficiary
    in canonical form and the execution date, or the request's 400 (never recorded)."""
    if not is_amount_minor(new.amount_minor):
        raise InvalidAmount("amount_minor must be a positive integer up to 2^53 - 1", param="amount_minor")
    validation.check_rail(new.rail, new.currency)
    beneficiary = validation.normalize_beneficiary(new.rail, new.beneficiary)
    return beneficiary, validation.execute_on(new.execute_on, today=utc_day(now_us))


def new_payout(
    tenant_id: str,
    payout_id: str,
    new: NewPayout,
    beneficiary: Beneficiary,
    execute_on: str,
    transfer_id: str,
    now_us: int,
) -> Payout:
    """The payout as it is born: `scheduled`, its hold named."""
    return Payout(
        tenant_id=tenant_id,
        id=payout_id,
        idempotency_key=new.idempotency_key,
        amount_minor=new.amount_minor,
        currency=new.currency,
        rail=new.rail,
        source_account_id=new.source_account_id,
        beneficiary_name=beneficiary.name,
        iban=beneficiary.iban,
        bic=beneficiary.bic,
        routing_number=beneficiary.routing_number,
        account_number=beneficiary.account_number,
        execute_on=execute_on,
        metadata=dict(new.metadata),
        status=states.SCHEDULED,
        failure_code=None,
        return_code=None,
        transfer_id=transfer_id,
        bank_reference=None,
        batch_id=None,
        **columns.fresh(),
        sent_at_us=None,
        settled_at_us=None,
        returned_at_us=None,
        created_at_us=now_us,
        updated_at_us=now_us,
    )


def birth_data(payout: Payout) -> dict[str, Any]:
    """The data of a payout's birth event."""
    return {"execute_on": payout.execute_on, "transfer_id": payout.transfer_id}


def hold_spec(payout: Payout, in_transit_id: str) -> TransferSpec:
    """The hold that reserves the payout's amount on its source (`money.hold` makes the same)."""
    return TransferSpec(
        entries=(
            EntrySpec(payout.source_account_id, "debit", payout.amount_minor),
            EntrySpec(in_transit_id, "credit", payout.amount_minor),
        ),
        pending=True,
        currency=payout.currency,
        reference_type="payout",
        reference_id=payout.id,
        owner_id=payout.id,
        guard_available=(payout.source_account_id,),
    )


def plan_create(
    scope: KeyScope,
    new: NewPayout,
    *,
    actor: str,
    in_transit_id: str | None,
    context: EventContext,
    new_ids: NewIds,
    encode: Encode,
) -> Plan | None:
    """The rows of one payout's creation and its answer, or None for a request the reference
    path must answer (a request its rules refuse; a source that is the in-transit account).
    `in_transit_id`: the tenant's in-transit account of the currency as this process last
    wrote to it, or None."""
    assert scope.expires_at_us is None, "a payout's key is kept forever (SPEC §3.1)"
    try:
        beneficiary, execute_on = check_request(new, scope.now_us)
    except DomainError:
        return None  # the reference path answers it, after the key's replay where it exists
    if in_transit_id == new.source_account_id:
        return None
    now_us, templates = scope.now_us, money.templates(new.currency)
    in_transit = new_ids.account_ids[in_transit_index(templates)] if in_transit_id is None else in_transit_id
    payout = new_payout(scope.tenant_id, new_ids.payout_id, new, beneficiary, execute_on, new_ids.transfer_id, now_us)
    spec = hold_spec(payout, in_transit)
    deltas, _ = ledger.entry_totals(spec.entries, pending=True)
    entries = tuple(
        PlannedEntry(entry_id, entry.account_id, entry.direction, entry.amount_minor, deltas[entry.account_id])
        for entry_id, entry in zip((new_ids.debit_entry_id, new_ids.credit_entry_id), spec.entries, strict=True)
    )
    birth = recording.event_row(
        lifecycle.MACHINE,
        payout,
        None,
        cause=CAUSE,
        actor=actor,
        now_us=payout.updated_at_us,
        data=birth_data(payout),
        event_id=new_ids.birth_event_id,
        context=context,
    )
    answer = Outcome(STATUS_CREATED, encode(schemas.payout_json(payout, [_event(birth)])))
    plan = Plan(
        payout=payout,
        answer=answer,
        key_row=scope.row(answer),
        accounts=tuple(templates),
        account_ids=new_ids.account_ids,
        in_transit_known=in_transit_id is not None,
        transfer_row=ledger.transfer_values(
            scope.tenant_id, new_ids.transfer_id, "pending", spec, now_us, idempotency_key=None, batch_id=None
        ),
        entries=(entries[0], entries[1]),
        payout_row=payout_row(payout),
        event_rows=(birth, _api_call(scope, payout, actor, context, new_ids.api_call_event_id)),
    )
    _check_plan(plan)
    return plan


def _api_call(scope: KeyScope, payout: Payout, actor: str, context: EventContext, event_id: str) -> dict[str, Any]:
    """The request's audit event, as the route records an accepted payout."""
    return audit_rows.api_call_row(
        payout.tenant_id,
        event_id=event_id,
        context=context,
        object_type="payout",
        object_id=payout.id,
        operation=OPERATION,
        status=STATUS_CREATED,
        outcome="accepted",
        actor=actor,
        now_us=scope.now_us,
        data={"idempotency_key": scope.key},
    )


def _event(row: dict[str, Any]) -> Event:
    """The birth event as the answer's history shows it (what `service.history` reads back)."""
    return Event(
        id=row["id"],
        kind=row["kind"],
        type=row["type"],
        object_type=row["object_type"],
        object_id=row["object_id"],
        from_state=row["from_state"],
        to_state=row["to_state"],
        cause=row["cause"],
        actor=row["actor"],
        data=json.loads(row["data"]),
        created_at_us=row["created_at_us"],
    )


def _check_plan(plan: Plan) -> None:
    """Pair assertions: the hold's entries balance and are the payout's amount, on its
    accounts, the source guarded; every row names the payout; the key holds the answer."""
    payout, source_entry, in_transit_entry = plan.payout, plan.source_entry, plan.in_transit_entry
    assert (source_entry.direction, in_transit_entry.direction) == ("debit", "credit")
    assert source_entry.amount_minor - in_transit_entry.amount_minor == 0, "a transfer's entries sum to zero"
    assert source_entry.amount_minor == payout.amount_minor, "the hold's amount is the payout's"
    assert 0 < payout.amount_minor <= AMOUNT_MINOR_MAX
    assert source_entry.delta == Totals(0, 0, payout.amount_minor, 0), "a hold moves pending totals only"
    assert in_transit_entry.delta == Totals(0, 0, 0, payout.amount_minor)
    assert source_entry.account_id == payout.source_account_id != in_transit_entry.account_id
    assert plan.in_transit.code == in_transit_code(payout.currency) and plan.in_transit.normal_balance == "credit"
    assert all(template.currency == payout.currency for template in plan.accounts)
    transfer = plan.transfer_row
    assert (transfer["id"], transfer["kind"]) == (payout.transfer_id, "pending")
    assert transfer["owner_id"] == transfer["reference_id"] == payout.id, "the payout owns its hold"
    assert payout.status == states.SCHEDULED and payout.created_at_us == payout.updated_at_us
    birth, api_call = plan.event_rows
    assert plan.payout_row["id"] == birth["object_id"] == api_call["object_id"] == payout.id
    assert birth["object_sequence"] == 1, "a payout's birth is its first published event"
    assert "snapshot" not in api_call, "an api_call is not published"
    assert plan.key_row["response_status"] == plan.answer.status == STATUS_CREATED
