"""The one status change, for every table with a `status` column and a transition table.

`change` checks the transition table (a move it does not allow is a programmer's error: the
caller decides first), changes the status by compare-and-set on the stored status (`UPDATE ...
WHERE status IN (:from)`), and, only if the row changed, in the same transaction writes the
change's record (`record`). Whoever comes second finds the status changed and changes nothing
(0 rows): a cancel racing a worker, a webhook racing the resolver, two people resolving one
break, a delivery's endpoint deleted while it was being POSTed.

Who calls it: `Machine.move` (payments, refunds, payouts, manual resolutions: the domain's
ledger effect and the audit event are its record), a reconciliation break's
`reconciliation.states.move` (its note event), and webhook deliveries and endpoints
(`webhooks.rounds`, `webhooks.service`: the endpoint's audit note; a delivery's record is the
attempt row its transaction wrote before the change, or its endpoint's deletion).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from sqlalchemy import Connection, Table

from paycore.db.sql import update_by_key

Record = Callable[[int], None]  # given how many rows changed (1 but for a bulk change)


def change(
    connection: Connection,
    table: Table,
    key: Mapping[str, Any],
    move: tuple[str, str],
    *,
    transitions: Collection[tuple[str, str]],
    record: Record | None,
    values: Mapping[str, Any] | None = None,
    stored: Collection[str] | None = None,
) -> int:
    """Move the row `key` names (column -> value; a key naming several rows moves each of them,
    e.g. an endpoint's pending deliveries) as `move` says (from, to), with `values` written
    beside the status, then `record` it. `stored`: every stored spelling of the from-status
    (default: itself). `record` None: the caller wrote the change's record in this transaction
    already. Returns how many rows changed: 0 when none was in the from-status any more."""
    from_status, to_status = move
    assert move in transitions, (table.name, move)
    assert (values or {}).get("status", to_status) == to_status, values
    written = {**(values or {}), "status": to_status}
    changed = update_by_key(connection, table, key, written, status_in=stored if stored is not None else (from_status,))
    if changed and record is not None:
        record(changed)
    return changed
