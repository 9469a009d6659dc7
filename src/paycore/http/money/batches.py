"""`POST /v1/transfers/batch` on the thin edge (ADR 0026, decision 4; SPEC §4).

A batch whose body is well formed (a JSON object, read once by `kit.strict_json`, holding only
`transfers`: a non-empty list of objects each of exactly the shape `POST /v1/transfers`'s edge
reads, `transfers.read_transfer_object`) is answered here: authenticated by `http.context` as
the FastAPI route's dependency does (401 before anything about the body; `authenticate_on_loop`),
then `routers.ledger.batch_answer_on_loop`, from the event loop with no worker thread (ADR 0026
decision 4): `routers.ledger.batch_request` is the one home of the key, the batch's bound and
each transfer's metadata bounds both edges share, and `ledger.batch_keyed.create_batch_on_loop`
makes the write (one call of `paycore_create_batch` with its key on PostgreSQL, on a connection
of the loop's, `db/loop_calls.py`; SQLite's list handed to the writer); only when the data
plane declines does PostgreSQL's reference path take one worker thread. The FastAPI route runs
`batch_answer`, the same rules and statements, on a worker thread. No dependency injection, no
pydantic validation of 8,000 models.

Every other body (not JSON, a repeated key, no transfers or an empty list, a transfer that is
not an object or that the transfers' edge would hand over: a wrong type, a bool or a float for
an amount, a number as text, an extra field, a bound crossed, a NUL) goes whole to the FastAPI
route, with the bytes already read: its validation answers it as always, naming the transfer
(`transfers[3].amount_minor`). The rules past the shape (two shapes at once, too many entries,
an unknown account, the funds) are `batch_answer`'s on both edges, so each refusal names its
transfer as before. `tests/integration/http/test_batch_edge.py` holds the two edges to the same
answers.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from paycore.http.context import authenticate_on_loop
from paycore.http.money.edge import Edge, Endpoint, fastapi_route, read_object
from paycore.http.money.transfers import read_transfer_object
from paycore.http.routers import ledger as ledger_router
from paycore.ledger.schemas import TransferBatch

_FIELDS: Final = frozenset(TransferBatch.model_fields)


def read_batch(content_type: str | None, body: bytes) -> tuple[TransferBatch, dict[str, Any]] | None:
    """(the batch, its `model_dump(mode="json")`) of a well-formed body; None for any other body,
    which the FastAPI route answers. Accepts only what `TransferBatch` accepts."""
    document = read_object(content_type, body)
    if document is None or document.keys() != _FIELDS:
        return None
    listed = document["transfers"]
    if type(listed) is not list or not listed:  # the model's min_length=1; the count's bound is batch_answer's
        return None
    models, dumps = [], []
    for item in listed:  # bounded by the body's size (BodyLimit)
        read = read_transfer_object(item) if type(item) is dict else None
        if read is None:
            return None
        models.append(read[0])
        dumps.append(read[1])
    return TransferBatch.model_construct(transfers=models), {"transfers": dumps}


class _BatchEndpoint(Endpoint):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        batch = read_batch(request.headers.get("content-type"), body)
        if batch is None:
            await self.hand_over(scope, body, receive, send)
            return
        # The caller, the accounts' facts and the write from the loop: no worker thread.
        await authenticate_on_loop(request)
        response = await ledger_router.batch_answer_on_loop(request, *batch)
        await response(scope, receive, send)


# Made once, at import, and shared by every app of the process (ADR 0023).
_FALLBACK: Final = fastapi_route(ledger_router.router, ledger_router.create_batch)
ROUTE: Final = Edge(_FALLBACK, _BatchEndpoint(_FALLBACK))
