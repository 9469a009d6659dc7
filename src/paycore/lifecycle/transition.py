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
(`webhooks.jobs`, `webhooks.service`: the endpoint's audit note; a delivery's record is the
attempt row its transaction wrote before the change, or its endpoint's deletion).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import Connection, Table, Update, bindparam, update

Record = Callable[[int], None]  # given how many rows changed (1 but for a bulk change)
# Compare-and-set statements kept built: one per (table, key columns, columns set) the code
# uses, a few dozen; past this many the least used is built again when next needed.
STATEMENT_SHAPES_MAX: Final = 256


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
    statement = compare_and_set(table, tuple(key), tuple(written))
    parameters = {f"k_{name}": value for name, value in key.items()}
    parameters.update({f"v_{name}": value for name, value in written.items()})
    parameters["from_statuses"] = list(stored if stored is not None else (from_status,))
    changed = int(connection.execute(statement, parameters).rowcount)
    if changed and record is not None:
        record(changed)
    return changed


@lru_cache(maxsize=STATEMENT_SHAPES_MAX)
def compare_and_set(table: Table, key: tuple[str, ...], columns: tuple[str, ...]) -> Update:
    """`UPDATE table SET columns WHERE key AND status IN (:from_statuses)`, built once per
    shape: the expression and its cache key cost more CPU than running it (issue 31). Bind
    parameters: `k_<key column>`, `v_<set column>`, `from_statuses` (a list)."""
    return (
        update(table)
        .where(
            *(table.c[name] == bindparam(f"k_{name}") for name in key),
            table.c.status.in_(bindparam("from_statuses", expanding=True)),
        )
        .values({name: bindparam(f"v_{name}") for name in columns})
    )
