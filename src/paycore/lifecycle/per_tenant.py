"""Due work claimed tenant by tenant (docs/adr/0033-claims-per-tenant.md), the one way every
worker round takes rows: the lifecycle's items (`store.claim_due`), leased rows (`lease.claim`:
webhook endpoints, kept dispute answers), payouts whose day has come and unmatched processor
events.

1. **Which tenants** (`due_tenants`): a plain read, no lock, of the oldest
   `DUE_ROWS_SCANNED_MAX` due rows (the claim's own condition, ordered by its `rank`), grouped
   by tenant, the tenant whose oldest due row waits longest first, at most
   `TENANTS_PER_ROUND_MAX` tenants a round: the others wait for the next rounds.
2. **Each tenant's rows**: the claim's condition with `tenant_id = :tenant`, in its order,
   bounded, locked with FOR UPDATE SKIP LOCKED on PostgreSQL, then marked with the lease by
   their keys (`UPDATE ... RETURNING`) when the claim marks them. A first pass gives each
   tenant an equal share of the batch, so that one tenant's backlog cannot fill a round while
   another tenant's work is due; a second pass gives the room left to the tenants that filled
   their share. At most `CLAIM_PASSES_MAX` claims per tenant.

Why: Citus locks rows (FOR UPDATE, SKIP LOCKED) only in a statement routed to one shard, that is
with an equality on `tenant_id`; a claim across tenants is refused there. On one PostgreSQL the
locks are the same row locks as before, so rounds in several processes still take disjoint rows
(the lock skips what another transaction holds; the condition, checked again on the locked row,
skips what another round claimed and committed). SQLite has one writer, whose write
transaction is already exclusive: the same statements without the lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import ColumnElement, Connection, Row, Select, Table, func, select, update

# Due rows read (oldest first) to find the tenants with due work: the read is bounded whatever
# the backlog. A tenant whose oldest due row is behind this many rows of other tenants waits
# until they are taken (first come, first served, as the claim across tenants was).
DUE_ROWS_SCANNED_MAX: Final = 1_000
# Tenants served by one round: the statements of a round stay few however many tenants have
# work; the others, found later by their oldest due row, are served by the next rounds.
TENANTS_PER_ROUND_MAX: Final = 10
# Claiming statements per tenant and round: its share, then the room the others left.
CLAIM_PASSES_MAX: Final = 2


def due_tenants(
    connection: Connection, table: Table, due: Select[Any], rank: ColumnElement[Any], *, tenants_max: int
) -> list[str]:
    """The tenants with rows `due` finds, the oldest by `rank` first, at most `tenants_max`
    (a plain read over every tenant: no lock, so Citus runs it on every node)."""
    assert tenants_max > 0
    window = (
        due.with_only_columns(table.c.tenant_id, rank.label("rank"))
        .order_by(None)
        .order_by(rank)
        .limit(DUE_ROWS_SCANNED_MAX)
        .subquery("due_window")
    )
    query = (
        select(window.c.tenant_id)
        .group_by(window.c.tenant_id)
        .order_by(func.min(window.c.rank), window.c.tenant_id)
        .limit(tenants_max)
    )
    found = [str(tenant) for tenant in connection.execute(query).scalars()]
    assert len(found) == len(set(found)) <= tenants_max
    return found


def claim(
    connection: Connection,
    table: Table,
    due: Select[Any],
    *,
    rank: ColumnElement[Any],
    limit: int,
    key: str = "id",
    mark: Mapping[str, Any] | None = None,
) -> dict[str, list[Row[Any]]]:
    """Up to `limit` rows `due` finds (it selects from `table`, with the claim's condition and
    order, unbounded), taken tenant by tenant (see the module): tenant -> its rows, locked on
    PostgreSQL. `key` is the column that names a row within its tenant. With `mark` (the
    lease's values), each tenant's rows are locked, then marked by their keys (UPDATE ...
    RETURNING, in no particular order); without, they are read locked, in `due`'s order, and
    the caller changes them in this transaction."""
    assert limit > 0
    tenants = due_tenants(connection, table, due, rank, tenants_max=min(limit, TENANTS_PER_ROUND_MAX))
    taken: dict[str, list[Row[Any]]] = {tenant: [] for tenant in tenants}
    if not tenants:
        return taken
    share = -(-limit // len(tenants))  # ceiling: every tenant found gets at least one row
    room = limit
    for passed in range(CLAIM_PASSES_MAX):
        for tenant in tenants:
            mine = taken[tenant]
            if room == 0 or (passed > 0 and len(mine) < share):
                continue  # the batch is full, or the tenant had no more on its first pass
            wanted = min(room, share if passed == 0 else room)
            chosen = _tenant_due(connection, table, due, tenant, [row._mapping[key] for row in mine], key, wanted)
            rows = _marked(connection, table, tenant, chosen, key, mark) if mark else list(connection.execute(chosen))
            assert len(rows) <= wanted and all(row._mapping["tenant_id"] == tenant for row in rows)
            mine.extend(rows)
            room -= len(rows)
    assert sum(len(rows) for rows in taken.values()) <= limit
    return taken


def _tenant_due(
    connection: Connection,
    table: Table,
    due: Select[Any],
    tenant_id: str,
    already: Sequence[Any],
    key: str,
    limit: int,
) -> Select[Any]:
    """The tenant's due rows, up to `limit`, but those this round took already (its own locks
    do not skip them); locked, skipping rows another transaction holds, on PostgreSQL."""
    query = due.where(table.c.tenant_id == tenant_id)
    if already:
        query = query.where(table.c[key].not_in(list(already)))
    query = query.limit(limit)
    if connection.dialect.name == "postgresql":
        query = query.with_for_update(of=table, skip_locked=True)
    return query


def _marked(
    connection: Connection, table: Table, tenant_id: str, chosen: Select[Any], key: str, mark: Mapping[str, Any]
) -> list[Row[Any]]:
    """The rows `chosen` finds, locked, then marked with `mark` by their keys, as marked. Two
    statements: as one (`UPDATE ... WHERE key IN (the locking read)`) PostgreSQL may run the
    locking read again per row, where it skips the rows the UPDATE changed and takes more than
    its limit; and with the read in a CTE a generic plan joined it to every row of the tenant."""
    keys = [row[0] for row in connection.execute(chosen.with_only_columns(table.c[key]))]
    if not keys:
        return []
    mine = table.c[key].in_(keys)
    statement = update(table).where(table.c.tenant_id == tenant_id, mine).values(dict(mark))
    return list(connection.execute(statement.returning(*table.c)))


def flatten(taken: dict[str, list[Row[Any]]]) -> list[Row[Any]]:
    """The rows of every tenant, tenant after tenant in the order they were found."""
    return [row for rows in taken.values() for row in rows]
