"""The SQL every table the lifecycle drives shares. Each function takes the table; the
domain's repository owns everything else about its rows. And the lifecycle's own table,
`work_faults` (`lifecycle.faults`).

Status changes are compare-and-set on the stored status. Claims take due rows tenant by tenant
(`per_tenant`), with FOR UPDATE SKIP LOCKED and an equality on `tenant_id` on PostgreSQL (as
Citus requires), so concurrent workers (threads or processes) take disjoint sets; SQLite has
one writer, whose write transaction is already exclusive.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import Connection, Row, Select, Table, and_, bindparam, func, insert, or_, select, update

from paycore.db.sql import keys_in, update_by_key
from paycore.lifecycle import per_tenant
from paycore.lifecycle.columns import CLAIMED_BY, CLAIMED_UNTIL_US, FAULTED_AT_US, IN_DOUBT_SINCE_US, NEXT_ATTEMPT_AT_US
from paycore.lifecycle.models import work_faults

# Item loads kept built: two per table (locked or not); past this many the least used is built
# again when next needed.
_LOADS_MAX: Final = 64


def get(
    connection: Connection, table: Table, tenant_id: str, item_id: str, *, for_update: bool = False
) -> Row[Any] | None:
    locked = for_update and connection.dialect.name == "postgresql"
    return connection.execute(_get_statement(table, locked), {"t": tenant_id, "id": item_id}).first()


@lru_cache(maxsize=_LOADS_MAX)
def _get_statement(table: Table, locked: bool) -> Select[Any]:
    """An item by its key, built once per table: every status change loads its item with it,
    and building the expression and its cache key cost more CPU than running it."""
    query = select(table).where(table.c.tenant_id == bindparam("t"), table.c.id == bindparam("id"))
    return query.with_for_update() if locked else query


def get_any(connection: Connection, table: Table, item_id: str, tenant_id: str | None) -> Row[Any] | None:
    """The item with this id, in `tenant_id` or in any tenant (ids are unique: ULIDs)."""
    query = select(table).where(table.c.id == item_id)
    if tenant_id is not None:
        query = query.where(table.c.tenant_id == tenant_id)
    return connection.execute(query.limit(1)).first()


def get_many(
    connection: Connection, table: Table, keys: Collection[tuple[str, str]], *, for_update: bool = False
) -> list[Row[Any]]:
    """The items with these (tenant_id, id) keys, in key order (one statement; missing keys are
    left out). Locked in that order when `for_update` on PostgreSQL."""
    if not keys:
        return []
    query = select(table).where(keys_in((table.c.tenant_id, table.c.id), keys))
    if for_update and connection.dialect.name == "postgresql":
        query = query.with_for_update()
    return list(connection.execute(query.order_by(table.c.tenant_id, table.c.id)))


def page_between(
    connection: Connection,
    table: Table,
    *,
    time_column: str,
    statuses: Collection[str],
    start_us: int,
    end_us: int,
    after: tuple[str, str] | None,
    limit: int,
) -> list[Row[Any]]:
    """One page, over every tenant in key order after `after`, of the items in `statuses` whose
    `time_column` is in [start_us, end_us). Successive pages walk the tenants' keys once: a
    page continues the tenant it stopped in (`tenant_id = :t AND id > :id`, an index range)
    and only a page that runs past that tenant's end looks for the next tenants (a row-value
    `(tenant_id, id) > (...)` was measured to make PostgreSQL start each page from the start of
    an index: quadratic in the day's objects)."""
    moment = table.c[time_column]
    base = select(table).where(table.c.status.in_(list(statuses)), moment >= start_us, moment < end_us)
    if after is None:
        return list(connection.execute(base.order_by(table.c.tenant_id, table.c.id).limit(limit)))
    tenant_id, item_id = after
    same_tenant = base.where(table.c.tenant_id == tenant_id, table.c.id > item_id).order_by(table.c.id)
    rows = list(connection.execute(same_tenant.limit(limit)))
    if len(rows) < limit:
        next_tenants = base.where(table.c.tenant_id > tenant_id).order_by(table.c.tenant_id, table.c.id)
        rows += connection.execute(next_tenants.limit(limit - len(rows)))
    return rows


def exists(connection: Connection, table: Table, tenant_id: str, item_id: str) -> bool:
    query = select(table.c.id).where(table.c.tenant_id == tenant_id, table.c.id == item_id)
    return connection.execute(query).first() is not None


def page(
    connection: Connection,
    table: Table,
    tenant_id: str,
    *,
    statuses: Collection[str] | None,
    starting_after: str | None,
    limit: int,
    newest_first: bool = False,
) -> list[Row[Any]]:
    """One page of a tenant's items by id (ids are time-ordered), in `statuses` if given, after
    the item `starting_after` in that order (the caller checks that it is the tenant's)."""
    query = select(table).where(table.c.tenant_id == tenant_id)
    if statuses is not None:
        query = query.where(table.c.status.in_(list(statuses)))
    if starting_after is not None:
        query = query.where(table.c.id < starting_after if newest_first else table.c.id > starting_after)
    order = table.c.id.desc() if newest_first else table.c.id
    return list(connection.execute(query.order_by(order).limit(limit)))


def make_due(
    connection: Connection, table: Table, tenant_id: str, item_id: str, statuses: Collection[str], now_us: int
) -> bool:
    """Due now, unless a worker holds it or it left `statuses`; True when made due."""
    statement = update(table).where(
        table.c.tenant_id == tenant_id,
        table.c.id == item_id,
        table.c.status.in_(list(statuses)),
        or_(table.c.claimed_until_us.is_(None), table.c.claimed_until_us < now_us),
    )
    return connection.execute(statement.values(next_attempt_at_us=now_us)).rowcount == 1


def set_values(
    connection: Connection,
    table: Table,
    tenant_id: str,
    item_id: str,
    values: Mapping[str, Any],
    *,
    statuses: Collection[str] | None = None,
) -> bool:
    """Set `values` on the item (only while it is in `statuses`, when given); True if it was."""
    key = {"tenant_id": tenant_id, "id": item_id}
    return update_by_key(connection, table, key, values, status_in=statuses) == 1


def claim_due(
    connection: Connection,
    table: Table,
    *,
    statuses: Collection[str],
    now_us: int,
    worker_id: str,
    lease_until_us: int,
    limit: int,
    mark: bool = True,
) -> list[dict[str, Any]]:
    """Claim up to `limit` items in `statuses` whose next attempt is due and whose earlier
    claim (if any) has lapsed, tenant by tenant (`per_tenant.claim`: the tenants waiting longest
    first, each its share of the batch), oldest due first within a tenant. Returns the rows as
    claimed: a read of the tenants, then per tenant the locking read and one UPDATE. `mark=False`
    takes the locking read alone and leaves the UPDATE to the caller, who changes each row in
    this transaction anyway (a send round's move to `sending`)."""
    due = (
        select(table)
        .where(
            table.c.status.in_(list(statuses)),
            table.c.next_attempt_at_us <= now_us,
            or_(table.c.claimed_until_us.is_(None), table.c.claimed_until_us < now_us),
        )
        .order_by(table.c.next_attempt_at_us, table.c.id)
    )
    claim = {CLAIMED_BY: worker_id, CLAIMED_UNTIL_US: lease_until_us}
    rank = table.c.next_attempt_at_us
    taken = per_tenant.claim(connection, table, due, rank=rank, limit=limit, mark=claim if mark else None)
    claimed = []
    for found in taken.values():  # a tenant's rows, oldest due first (a marking claim returns them in any order)
        claimed += sorted((dict(row._mapping) for row in found), key=lambda row: (row[NEXT_ATTEMPT_AT_US], row["id"]))
    return claimed


@dataclass(frozen=True)
class Search:
    """What the console's lists filter on; None: any. Newest first."""

    tenant_id: str | None = None  # None: every tenant
    statuses: Collection[str] | None = None  # stored names
    created_gte_us: int | None = None
    created_lt_us: int | None = None
    currency: str | None = None  # the amounts' currency (ISO 4217)
    amount_gte_minor: int | None = None
    amount_lte_minor: int | None = None
    reference: str | None = None  # the item's id, or one of its references, exactly
    in_doubt_first: bool = False  # oldest in doubt first (the in-doubt queue), then by id
    starting_after: str | None = None  # an item id of the previous page
    limit: int = 50


def search(connection: Connection, table: Table, query: Search, references: Collection[str]) -> list[Row[Any]]:
    """One page of items matching `query`, newest first (or the oldest in doubt first). A
    reference matches the id or any of `references` (columns such as the processor's id)."""
    statement = select(table)
    if query.tenant_id is not None:
        statement = statement.where(table.c.tenant_id == query.tenant_id)
    if query.statuses is not None:
        statement = statement.where(table.c.status.in_(list(query.statuses)))
    if query.created_gte_us is not None:
        statement = statement.where(table.c.created_at_us >= query.created_gte_us)
    if query.created_lt_us is not None:
        statement = statement.where(table.c.created_at_us < query.created_lt_us)
    if query.currency is not None:
        statement = statement.where(table.c.currency == query.currency)
    if query.amount_gte_minor is not None:
        statement = statement.where(table.c.amount_minor >= query.amount_gte_minor)
    if query.amount_lte_minor is not None:
        statement = statement.where(table.c.amount_minor <= query.amount_lte_minor)
    if query.reference is not None:
        columns = [table.c.id, *(table.c[name] for name in references)]
        statement = statement.where(or_(*(column == query.reference for column in columns)))
    if query.in_doubt_first:
        return list(
            connection.execute(_in_doubt_order(statement, table, query.starting_after, connection).limit(query.limit))
        )
    if query.starting_after is not None:
        statement = statement.where(table.c.id < query.starting_after)
    return list(connection.execute(statement.order_by(table.c.id.desc()).limit(query.limit)))


def matching(
    connection: Connection, table: Table, column: str, value: str, *, tenant_id: str | None, limit: int
) -> list[Row[Any]]:
    """Up to `limit` items whose `column` equals `value` exactly, in one tenant or in every one:
    one index lookup (the console's search; each searched column has an index led by it,
    migration 0041). No ORDER BY: with one, a planner may walk the id index instead."""
    query = select(table).where(table.c[column] == value)
    if tenant_id is not None:
        query = query.where(table.c.tenant_id == tenant_id)
    return list(connection.execute(query.limit(limit)))


def metadata_matching(
    connection: Connection, table: Table, needle: str, *, tenant_id: str | None, window: int, limit: int
) -> list[Row[Any]]:
    """Up to `limit` of the newest `window` items (of one tenant or of every one) whose stored
    metadata text holds `needle` (a JSON string, quotes included): a bounded read of the id
    index's newest end, never the whole history. The caller checks each candidate's values."""
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    newest = select(table.c.tenant_id, table.c.id, table.c.metadata)
    if tenant_id is not None:
        newest = newest.where(table.c.tenant_id == tenant_id)
    recent = newest.order_by(table.c.id.desc()).limit(window).subquery("recent")
    query = select(recent).where(recent.c.metadata.like(f"%{escaped}%", escape="\\")).limit(limit)
    return list(connection.execute(query))


def _in_doubt_order(statement: Any, table: Table, starting_after: str | None, connection: Connection) -> Any:
    """Oldest in doubt first: by (in_doubt_since_us, id), after the item `starting_after`."""
    since, ident = table.c[IN_DOUBT_SINCE_US], table.c.id
    if starting_after is not None:
        found = connection.execute(select(since).where(ident == starting_after)).first()
        if found is not None and found[0] is not None:
            statement = statement.where(or_(since > found[0], and_(since == found[0], ident > starting_after)))
    return statement.order_by(since, ident)


def faulted(connection: Connection, table: Table, *, tenant_id: str | None, limit: int) -> list[Row[Any]]:
    """The items a worker round could not move (`lifecycle.faults`), of one tenant or every
    one, oldest fault first (the partial index `ix_<table>_faulted`)."""
    query = select(table).where(table.c[FAULTED_AT_US].is_not(None))
    if tenant_id is not None:
        query = query.where(table.c.tenant_id == tenant_id)
    return list(connection.execute(query.order_by(table.c[FAULTED_AT_US], table.c.id).limit(limit)))


def insert_fault(connection: Connection, tenant_id: str, event_id: str, *, job: str, now_us: int) -> None:
    """A fault a worker round met (`lifecycle.faults`): its note's id and its job."""
    row = {"tenant_id": tenant_id, "event_id": event_id, "job": job, "created_at_us": now_us}
    connection.execute(insert(work_faults), row)


def faults_by_job(connection: Connection) -> dict[str, int]:
    """How many faults each job's rounds met, ever (jobs with none left out)."""
    query = select(work_faults.c.job, func.count()).group_by(work_faults.c.job)
    return {str(job): int(count) for job, count in connection.execute(query)}


def faulted_summary(connection: Connection, table: Table, *, tenant_id: str | None) -> tuple[int, int | None]:
    """(count, oldest faulted_at_us) of the items a worker round could not move."""
    faulted_at = table.c[FAULTED_AT_US]
    query = select(func.count(), func.min(faulted_at)).where(faulted_at.is_not(None))
    if tenant_id is not None:
        query = query.where(table.c.tenant_id == tenant_id)
    count, oldest = connection.execute(query).one()
    return int(count), oldest


def summary(
    connection: Connection, table: Table, status: str, *, since_column: str, tenant_id: str | None
) -> tuple[int, int | None]:
    """(count, oldest `since_column`) of the items in `status`, of one tenant or every one."""
    query = select(func.count(), func.min(table.c[since_column])).where(table.c.status == status)
    if tenant_id is not None:
        query = query.where(table.c.tenant_id == tenant_id)
    count, oldest = connection.execute(query).one()
    return int(count), oldest


def counts_by_status(
    connection: Connection, table: Table, *, tenant_id: str | None, created_gte_us: int | None = None
) -> dict[str, int]:
    """Items by stored status, of one tenant or every one, created since `created_gte_us`."""
    query = select(table.c.status, func.count()).group_by(table.c.status)
    if tenant_id is not None:
        query = query.where(table.c.tenant_id == tenant_id)
    if created_gte_us is not None:
        query = query.where(table.c.created_at_us >= created_gte_us)
    return {str(status): int(count) for status, count in connection.execute(query)}


def oldest_due_us(connection: Connection, table: Table, statuses: Collection[str], *, now_us: int) -> int | None:
    """When the oldest item in `statuses` that a worker should have taken by now fell due
    (its next attempt is past, nobody holds it); None: nothing is late. Worker lag."""
    query = select(func.min(table.c.next_attempt_at_us)).where(
        table.c.status.in_(list(statuses)),
        table.c.next_attempt_at_us <= now_us,
        or_(table.c.claimed_until_us.is_(None), table.c.claimed_until_us < now_us),
    )
    oldest: int | None = connection.execute(query).scalar_one()
    return oldest


def working_since_us(connection: Connection, table: Table, status: str = "processing") -> int | None:
    """When the oldest item in `status` (a call in flight) last changed status; None: none."""
    oldest: int | None = connection.execute(
        select(func.min(table.c.updated_at_us)).where(table.c.status == status)
    ).scalar_one()
    return oldest


def in_doubt_summary(
    connection: Connection, table: Table, status: str = "in_doubt", *, tenant_id: str | None = None
) -> tuple[int, int | None]:
    """(count, oldest in_doubt_since_us) over every tenant (or one): the in-doubt gauges."""
    return summary(connection, table, status, since_column=IN_DOUBT_SINCE_US, tenant_id=tenant_id)
