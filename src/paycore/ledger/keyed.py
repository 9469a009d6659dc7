"""A transfer created under an idempotency key: what `POST /v1/transfers` runs below HTTP.

The reference path is `idempotency.run` around `service.create_transfer`: one transaction
holding the key, the transfer and its response (ADR 0004). On PostgreSQL, a transfer that
succeeds is instead written by one call of `paycore_create_transfer` (migration 0009, ADR
0011), in autocommit, so that an account's row lock is held only inside the server.

The call commits only a success. Whatever else happens (the key exists, a refusal, a
deadlock) has written nothing, and the reference path then runs from the start and decides,
so replays, fingerprint checks and recorded refusals are the reference path's own. A lock
wait past its bound is answered at once, with what the reference path answers after the
same wait. The key makes that safe: if the call did
commit and only its answer was lost, the reference path finds the key and replays it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from paycore.db.engine import Database, is_lock_timeout
from paycore.idempotency import service as idempotency
from paycore.kit import ids
from paycore.kit.errors import DomainError
from paycore.ledger import repository, service
from paycore.ledger.postings import check_spec, entry_row, entry_totals, transfer_values
from paycore.ledger.types import Account, Transfer, TransferSpec, new_transfer_view

BuildSpec = Callable[[int], TransferSpec]
Render = Callable[[Transfer], str]

_STATUS_CREATED = 201
# What the call may answer with, having written nothing, for the reference path to decide:
# its refusals (migrations 0009, 0010), the ledger's triggers' (0024: a system account, a
# flow's transfer), a deadlock, a serialization failure. A lock wait past
# lock_timeout is answered at once, as the reference path would answer it (a second wait
# would double the bound). Any other error is raised.
_DECIDED_BY_REFERENCE = frozenset({"PC001", "PC002", "PC003", "PC004", "PC005", "40P01", "40001"})
# An entry's sequence number in the rendered body, left as 0 (sequences start at 1). The
# pattern cannot match inside a JSON string, where every quote is escaped; metadata values
# are strings, so no user value renders as a bare number there.
_SEQUENCE_SLOT = re.compile(r'(?<="account_sequence":)0(?=[,}])')


def create_transfer(
    database: Database,
    scope: idempotency.KeyScope,
    build_spec: BuildSpec,
    render: Render,
    render_refusal: Callable[[DomainError], idempotency.Outcome],
    *,
    one_call: bool = True,
) -> tuple[idempotency.Outcome, bool]:
    """Create the transfer `build_spec(now_us)` describes, once per key. Returns (outcome,
    replayed), as `idempotency.run` does. `render` turns the created transfer into the
    response body; `one_call=False` forces the reference path (tests, benchmarks)."""
    if one_call and database.is_postgres:
        outcome = create_in_one_call(database, scope, build_spec, render)
        if outcome is not None:
            return outcome, False

    def effect(connection: Connection) -> idempotency.Outcome:
        spec = build_spec(scope.now_us)
        transfer = service.create_transfer(
            connection, scope.tenant_id, spec, now_us=scope.now_us, idempotency_key=scope.key
        )
        return idempotency.Outcome(_STATUS_CREATED, render(transfer))

    return idempotency.run(database, scope, effect, render_refusal)


def create_in_one_call(
    database: Database, scope: idempotency.KeyScope, build_spec: BuildSpec, render: Render
) -> idempotency.Outcome | None:
    """PostgreSQL: the created transfer's outcome, committed by one call with its key; or
    None, having written nothing, when the reference path must decide."""
    try:
        spec = build_spec(scope.now_us)
    except DomainError:
        return None
    with database.autocommit() as connection:
        try:
            accounts = check_spec(connection, scope.tenant_id, spec, "")
        except DomainError:
            return None
        values, entry_rows = _rows(scope, spec, accounts)
        parts = _SEQUENCE_SLOT.split(render(new_transfer_view(values, entry_rows)))
        if len(parts) != len(entry_rows) + 1:
            return None  # a renderer this module does not understand: the reference path renders
        try:
            sequences = repository.create_transfer_call(
                connection, _call_params(scope, spec, accounts, values, entry_rows, parts)
            )
        except DBAPIError as error:
            if is_lock_timeout(error):
                raise idempotency.waited_too_long(error) from error
            if getattr(error.orig, "sqlstate", None) in _DECIDED_BY_REFERENCE:
                return None
            raise
    if sequences is None:
        return None  # the key exists
    body = parts[0] + "".join(str(number) + part for number, part in zip(sequences, parts[1:], strict=True))
    return idempotency.Outcome(_STATUS_CREATED, body)


def _rows(
    scope: idempotency.KeyScope, spec: TransferSpec, accounts: dict[str, Account]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The transfer's row and its entries' rows, as `service.create_transfer` writes them,
    with every entry's sequence number 0 (the call hands them out)."""
    transfer_id = ids.new_id("txn")
    kind = "pending" if spec.pending else "transfer"
    values = transfer_values(scope.tenant_id, transfer_id, kind, spec, scope.now_us, scope.key, None)
    entry_rows = [entry_row(scope.tenant_id, transfer_id, entry, accounts, 0, scope.now_us) for entry in spec.entries]
    return values, entry_rows


def _call_params(
    scope: idempotency.KeyScope,
    spec: TransferSpec,
    accounts: dict[str, Account],
    values: dict[str, Any],
    entry_rows: list[dict[str, Any]],
    parts: list[str],
) -> list[Any]:
    deltas, added = entry_totals(spec.entries, pending=spec.pending)
    account_ids = sorted(added)  # the reference path's lock order: no deadlocks between the two
    totals = [deltas[account_id] for account_id in account_ids]
    guarded = frozenset(spec.guard_available)
    guards = [
        accounts[account_id].normal_balance if accounts[account_id].no_overdraft or account_id in guarded else None
        for account_id in account_ids
    ]
    position = {account_id: index + 1 for index, account_id in enumerate(account_ids)}
    return [
        scope.tenant_id,
        scope.key,
        scope.request_fingerprint,
        scope.expires_at_us,
        values["id"],
        values["kind"],
        values["batch_id"],
        values["reference_type"],
        values["reference_id"],
        values["metadata"],
        values["expires_at_us"],
        scope.now_us,
        account_ids,
        [total.debits_posted_minor for total in totals],
        [total.credits_posted_minor for total in totals],
        [total.debits_pending_minor for total in totals],
        [total.credits_pending_minor for total in totals],
        [added[account_id] for account_id in account_ids],
        guards,
        [row["id"] for row in entry_rows],
        [row["account_id"] for row in entry_rows],
        [row["direction"] for row in entry_rows],
        [row["amount_minor"] for row in entry_rows],
        [row["currency"] for row in entry_rows],
        [position[row["account_id"]] for row in entry_rows],
        _STATUS_CREATED,
        parts,
    ]
