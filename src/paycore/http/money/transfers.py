"""`POST /v1/transfers` on the thin edge (ADR 0026, decision 4; SPEC §4).

A transfer whose body is well formed (JSON, read once by `kit.strict_json`, of exactly the
shape `ledger.schemas.TransferCreate` accepts: either shape, every optional field) is answered
here: authenticated by `http.context` as the FastAPI route's dependency does (401 before
anything about the body; `authenticate_on_loop`), then `routers.ledger.transfer_answer_on_loop`,
from the event loop with no worker thread (ADR 0026 decision 4): `routers.ledger.transfer_request`
is the one home of the key and the metadata's bounds both edges share, and
`ledger.keyed.create_transfer_on_loop` makes the data plane's reads and write on PostgreSQL's
connections of the loop (`db/loop_calls.py`) or hands SQLite's list to the writer; only when the
data plane declines does PostgreSQL's reference path take one worker thread. The FastAPI route
runs `transfer_answer`, the same rules and statements, on a worker thread. No dependency
injection, no pydantic validation.

Every other body (not JSON, a repeated key, a wrong type, a null where the model has a
default, an extra field, a bound crossed, a NUL) goes whole to the FastAPI route, with the
bytes already read: its validation answers it as always. This edge therefore only ever accepts
a subset of what the route's model accepts, and reads it to the same values;
`tests/integration/http/test_transfers_edge.py` holds the two edges to the same answers.
"""

from __future__ import annotations

import sys
from typing import Any, Final, get_args

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.http.context import authenticate_on_loop
from paycore.http.money import edge
from paycore.http.money.edge import Edge, Endpoint, fastapi_route, plain_text, read_object
from paycore.http.routers import ledger as ledger_router
from paycore.ledger.schemas import EntryIn, TransferCreate
from paycore.schemas import CURRENCY_LENGTH, ID_LENGTH_MAX

_FIELDS: Final = tuple(TransferCreate.model_fields)  # in order, as `model_dump` writes them
_FIELD_SET: Final = frozenset(_FIELDS)
_ENTRY_KEYS: Final = frozenset(EntryIn.model_fields)
_DIRECTIONS: Final = frozenset(get_args(EntryIn.model_fields["direction"].annotation))
_REFERENCE_TYPES: Final = frozenset(get_args(TransferCreate.model_fields["reference_type"].annotation))
_ID_FIELDS: Final = ("debit_account_id", "credit_account_id", "reference_id")


def read_transfer(content_type: str | None, body: bytes) -> tuple[TransferCreate, dict[str, Any]] | None:
    """(the transfer, its `model_dump(mode="json")`) of a well-formed body; None for any other
    body, which the FastAPI route answers. Accepts only what `TransferCreate` accepts (strict:
    no bool for an int, no float, no number as text; no extra key; no NUL in a string)."""
    document = read_object(content_type, body)
    return None if document is None else read_transfer_object(document)


def read_transfer_object(document: dict[str, Any]) -> tuple[TransferCreate, dict[str, Any]] | None:
    """`read_transfer` of a JSON object already read (a batch's transfer)."""
    if not document.keys() <= _FIELD_SET:
        return None
    read: dict[str, Any] = {
        "amount_minor": document.get("amount_minor"),
        "currency": document.get("currency"),
        "pending": document.get("pending", False),
        "expires_at": document.get("expires_at"),
        "metadata": document.get("metadata", {}),
        "reference_type": document.get("reference_type", "adjustment"),
        **{name: document.get(name) for name in _ID_FIELDS},
    }
    if not all(value is None or plain_text(value, 1, ID_LENGTH_MAX) for value in map(read.get, _ID_FIELDS)):
        return None
    if not (read["amount_minor"] is None or edge.amount_minor(read["amount_minor"])):
        return None
    if not (read["currency"] is None or plain_text(read["currency"], CURRENCY_LENGTH, CURRENCY_LENGTH)):
        return None
    if type(read["pending"]) is not bool:
        return None
    if not (read["expires_at"] is None or plain_text(read["expires_at"], 0, sys.maxsize)):
        return None
    if type(read["reference_type"]) is not str or read["reference_type"] not in _REFERENCE_TYPES:
        return None
    if not edge.metadata(read["metadata"]):
        return None
    well_formed, entries = _entries(document.get("entries"))
    if not well_formed:
        return None
    read["entries"] = entries
    body_json = {name: read[name] for name in _FIELDS}
    models = None if entries is None else [EntryIn.model_construct(**entry) for entry in entries]
    return TransferCreate.model_construct(**{**body_json, "entries": models}), body_json


def _entries(value: object) -> tuple[bool, list[dict[str, Any]] | None]:
    """(well formed, the entries as `model_dump` writes them, None for none)."""
    if value is None:
        return True, None
    if type(value) is not list:
        return False, None
    read = []
    for entry in value:  # bounded by the body's size (BodyLimit); their count by `to_spec`
        if type(entry) is not dict or entry.keys() != _ENTRY_KEYS:
            return False, None
        account_id, direction, amount_minor = entry["account_id"], entry["direction"], entry["amount_minor"]
        if not (plain_text(account_id, 1, ID_LENGTH_MAX) and type(direction) is str and direction in _DIRECTIONS):
            return False, None
        if not edge.amount_minor(amount_minor):
            return False, None
        read.append({"account_id": account_id, "direction": direction, "amount_minor": amount_minor})
    return True, read


class _TransfersEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        transfer = read_transfer(request.headers.get("content-type"), body)
        if transfer is None:
            await self.hand_over(scope, body, receive, send)
            return
        # The caller, the accounts' facts and the write from the loop: no worker thread.
        await authenticate_on_loop(request)
        response = await ledger_router.transfer_answer_on_loop(request, *transfer)
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_FALLBACK: Final = fastapi_route(ledger_router.router, ledger_router.create_transfer)
ROUTE: Final = Edge(_FALLBACK, _TransfersEndpoint(_FALLBACK))
