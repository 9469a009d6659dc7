"""The replay entry point (SPEC §7.2, a contract): `handle(charges, requests) -> list[dict]`.

Each call builds a new in-memory SQLite database, migrates it to the real schema, loads the
charges as settled payments, replays the requests in order through the refund service the
HTTP API uses (`paycore.refunds.service`), and throws the database away. Nothing is shared
between two calls: the ids start again at `rf_1` and earlier charges are unknown.

The layers, as in the HTTP API:

- the controller (`_Controller`): request dict -> service call -> response dict, one
  database transaction per request, domain errors mapped to (status, code) by one table;
- the service (`paycore.refunds.service`): the rules; the over-refund rule is one conditional
  UPDATE of the payment row, so it is the database that makes it atomic;
- the repositories (`paycore.refunds.repository`, `paycore.payments.repository`): SQL only.

Where §7.2 is silent, this is what happens:

- A charge is a dict with a non-empty `id` string of at most 64 characters (the schema's id
  length; a longer id raises ValueError, it would never be stored as given) and an `amount`
  integer in 1..2^53-1 (the schema's limit on amounts); other keys are ignored. `charges` and
  `requests` are lists (or tuples). Every bad charge raises ValueError mentioning `charge`.
- Every request is checked before any is replayed: not a dict, no `op`, or an unknown `op`
  raises ValueError mentioning `op`. Keys an op does not use are ignored.
- `refund`: an amount above 2^53-1 is `invalid_amount`; `"at": None` is present, so
  `invalid_time`; an `at` whose microseconds do not fit the 64-bit column (above
  9_223_372_036_854 s) is `invalid_time`. A missing or non-string `charge` is an unknown
  charge (404 `charge_not_found`), after the amount and time checks. A refused refund does
  not use up an id.
- `settle` / `fail`: a missing or non-string `refund` is an unknown refund (404). The change
  is recorded one microsecond after the refund's own time (an `at` on these ops is ignored);
  the response's `created_at` stays the refund's creation time.
- `summary`: a missing or non-string `charge` is an unknown charge (404).
- `"settled"` in the contract is the refund status `succeeded` inside paycore.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypeGuard

from sqlalchemy import Connection

from paycore.config import Settings
from paycore.db import migrate
from paycore.db.engine import Database
from paycore.db.metadata import ID_LENGTH
from paycore.kit import actors
from paycore.kit.errors import DomainError
from paycore.kit.money import AMOUNT_MINOR_MAX, is_amount_minor
from paycore.ledger import service as ledger
from paycore.payments import service as payments
from paycore.payments.errors import PaymentNotFound
from paycore.refunds import service, states
from paycore.refunds.errors import OverRefund, RefundNotFound, RefundStateConflict
from paycore.refunds.types import Refund

Response = dict[str, Any]

TENANT_ID: Final = "replay"
CURRENCY: Final = "USD"
MERCHANT_ACCOUNT_CODE: Final = "merchant.replay"
MEMORY_DATABASE_URL: Final = "sqlite://"
US_PER_S: Final = 1_000_000
AT_MAX: Final = (2**63 - 1) // US_PER_S  # created_at_us is a signed 64-bit column
CHARGES_MAX: Final = 1_000_000
REQUESTS_MAX: Final = 1_000_000
OPS: Final = frozenset({"refund", "settle", "fail", "summary"})

# Domain errors as the contract names them. An error not listed here is a programmer's error
# in the replay (e.g. PaymentNotRefundable: every loaded charge has succeeded) and propagates.
ERROR_RESPONSES: Final[dict[type[DomainError], tuple[int, str]]] = {
    PaymentNotFound: (404, "charge_not_found"),
    OverRefund: (422, "over_refund"),
    RefundNotFound: (404, "refund_not_found"),
    RefundStateConflict: (409, "not_pending"),
}
STATUS_NAMES: Final = {states.PENDING: "pending", states.SUCCEEDED: "settled", states.FAILED: "failed"}


def handle(charges: Sequence[dict[str, Any]], requests: Sequence[dict[str, Any]]) -> list[Response]:
    """One response per request, in order (SPEC §7.2). Raises ValueError for a bad charge
    (message mentions `charge`) or a bad request (message mentions `op`)."""
    loaded = checked_charges(charges)
    replayed = checked_requests(requests)
    database = Database(Settings(database_url=MEMORY_DATABASE_URL))
    try:
        migrate.upgrade(database)
        tenants = database.transaction(lambda connection: _load(connection, loaded))
        controller = _Controller(database, tenants)
        return [controller.dispatch(request) for request in replayed]
    finally:
        database.dispose()


# ---------------------------------------------------------------------------- input


def is_amount(value: object) -> TypeGuard[int]:
    """A positive integer of cents up to 2^53-1 (the schema's limit); `bool` is not an integer."""
    return is_amount_minor(value)


def is_time(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 <= value <= AT_MAX


def checked_charges(charges: object) -> list[tuple[str, int]]:
    """(id, amount) of each charge, or ValueError mentioning `charge`."""
    if not isinstance(charges, (list, tuple)):
        raise ValueError(f"charges must be a list of charge objects, got {type(charges).__name__}")
    if len(charges) > CHARGES_MAX:
        raise ValueError(f"at most {CHARGES_MAX} charges, got {len(charges)}")
    loaded: dict[str, int] = {}
    for index, charge in enumerate(charges):
        if not isinstance(charge, dict):
            raise ValueError(f"charge {index} is not an object: {charge!r}")
        charge_id, amount = charge.get("id"), charge.get("amount")
        if not isinstance(charge_id, str) or not 1 <= len(charge_id) <= ID_LENGTH:
            raise ValueError(f"charge {index}: id must be a string of 1 to {ID_LENGTH} characters, got {charge_id!r}")
        if not is_amount(amount):
            raise ValueError(
                f"charge {charge_id!r}: amount must be an integer in 1..{AMOUNT_MINOR_MAX}, got {amount!r}"
            )
        if charge_id in loaded:
            raise ValueError(f"charge id {charge_id!r} appears more than once")
        loaded[charge_id] = amount
    return list(loaded.items())


def checked_requests(requests: object) -> list[dict[str, Any]]:
    """The requests, each a dict with a known op, or ValueError mentioning `op`."""
    if not isinstance(requests, (list, tuple)):
        raise ValueError(f"requests must be a list of op objects, got {type(requests).__name__}")
    if len(requests) > REQUESTS_MAX:
        raise ValueError(f"at most {REQUESTS_MAX} op requests, got {len(requests)}")
    for index, request in enumerate(requests):
        if not isinstance(request, dict):
            raise ValueError(f"request {index} is not an object with an op: {request!r}")
        op = request.get("op")
        if not isinstance(op, str) or op not in OPS:
            raise ValueError(f"request {index}: unknown op {op!r}, expected one of {sorted(OPS)}")
    return list(requests)


def _load(connection: Connection, charges: list[tuple[str, int]]) -> dict[str, str]:
    """Each charge a settled payment (at time 0) into a merchant account, each under a tenant
    of its own; returns each charge's tenant. One tenant per charge keeps every ledger balance
    within 2^53 - 1 (docs/ledger.md, "The balance limit"): charges of up to 2^53 - 1 each would
    otherwise add up past it on one merchant account and one processor clearing account."""
    tenants = {}
    for index, (charge_id, amount) in enumerate(charges):
        tenant_id = f"{TENANT_ID}.{index + 1}"
        merchant = ledger.create_account(
            connection,
            tenant_id,
            code=MERCHANT_ACCOUNT_CODE,
            currency=CURRENCY,
            normal_balance="credit",
            no_overdraft=True,  # a refund beyond what was paid would also be refused by the ledger
            metadata={},
            now_us=0,
        )
        payments.import_settled_payment(
            connection,
            tenant_id,
            payment_id=charge_id,
            amount_minor=amount,
            currency=CURRENCY,
            destination_account_id=merchant.id,
            now_us=0,
        )
        tenants[charge_id] = tenant_id
    return tenants


# ---------------------------------------------------------------------------- controller


class _Controller:
    """Request dict -> service call in one transaction -> response dict."""

    def __init__(self, database: Database, tenants: dict[str, str]) -> None:
        self.database = database
        self.tenants = tenants  # charge id -> its tenant (an unknown charge: TENANT_ID, which has none)
        self.refund_tenants: dict[str, str] = {}  # refund id -> its charge's tenant
        self.refunds_created = 0  # ids are rf_1, rf_2, ... in creation order

    def dispatch(self, request: dict[str, Any]) -> Response:
        op = request["op"]
        try:
            if op == "refund":
                return self.refund(request)
            if op in ("settle", "fail"):
                return self.record_result(request, states.SUCCEEDED if op == "settle" else states.FAILED)
            assert op == "summary", op
            return self.summary(request)
        except DomainError as error:
            if type(error) not in ERROR_RESPONSES:
                raise
            status, code = ERROR_RESPONSES[type(error)]
            return {"status": status, "error": code}

    def refund(self, request: dict[str, Any]) -> Response:
        amount = request.get("amount")
        if not is_amount(amount):
            return {"status": 400, "error": "invalid_amount"}
        at = request.get("at", 0)
        if not is_time(at):
            return {"status": 400, "error": "invalid_time"}
        charge_id = request.get("charge")
        if not isinstance(charge_id, str):
            raise PaymentNotFound("no such charge", param="charge")
        refund_id = f"rf_{self.refunds_created + 1}"
        new = service.NewRefund(payment_id=charge_id, amount_minor=amount)
        tenant_id = self.tenants.get(charge_id, TENANT_ID)
        refund = self.database.transaction(
            lambda connection: service.create_refund(
                connection, tenant_id, new, now_us=at * US_PER_S, new_id=lambda: refund_id, actor=actors.LOCAL
            )
        )
        self.refund_tenants[refund_id] = tenant_id
        assert refund.id == refund_id and refund.amount_minor == amount and refund.status == states.PENDING
        self.refunds_created += 1  # only once the refund is committed: a refusal uses no id
        return {"status": 201, "refund": render(refund)}

    def record_result(self, request: dict[str, Any], to_state: str) -> Response:
        refund_id = request.get("refund")
        if not isinstance(refund_id, str):
            raise RefundNotFound("no such refund", param="refund")
        tenant_id = self.refund_tenants.get(refund_id, TENANT_ID)
        refund = self.database.transaction(
            lambda connection: record_processor_result(connection, tenant_id, refund_id, to_state)
        )
        return {"status": 200, "refund": render(refund)}

    def summary(self, request: dict[str, Any]) -> Response:
        charge_id = request.get("charge")
        if not isinstance(charge_id, str):
            raise PaymentNotFound("no such charge", param="charge")
        with self.database.read() as connection:
            totals = service.totals(connection, self.tenants.get(charge_id, TENANT_ID), charge_id)
        assert totals.refundable_minor >= 0, totals  # rule zero
        summary = {
            "charge": charge_id,
            "amount": totals.amount_minor,
            "pending": totals.pending_minor,
            "settled": totals.succeeded_minor,
            "failed": totals.failed_minor,
            "refundable": totals.refundable_minor,
        }
        return {"status": 200, "summary": summary}


def record_processor_result(connection: Connection, tenant_id: str, refund_id: str, to_state: str) -> Refund:
    """The processor's result for a pending refund: pending -> succeeded | failed, recorded one
    microsecond after the refund's own time."""
    return service.record_result(connection, tenant_id, refund_id, to_state, actor=actors.LOCAL)


def render(refund: Refund) -> Response:
    assert refund.created_at_us % US_PER_S == 0, refund  # made from whole seconds above
    return {
        "id": refund.id,
        "charge": refund.payment_id,
        "amount": refund.amount_minor,
        "status": STATUS_NAMES[refund.status],
        "created_at": refund.created_at_us // US_PER_S,
    }
