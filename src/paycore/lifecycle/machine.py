"""An object's state machine as data, and the only code that changes a status.

`move` checks the transition table, changes the status by compare-and-set on the stored
status, and in the same transaction writes the domain's ledger effect of that transition and
its audit event. Whoever comes second (a cancel racing a worker's claim, a webhook racing the
resolver) finds the status changed and changes nothing.

`apply_evidence` asks the domain what evidence proves (`Machine.decide`) and moves the item
there, step by step. One rule for every domain: a result whose amount or currency (or rail)
differ from the item's is never applied (`Machine.matches`): a person must look.

A new item is stored with its birth event by `recording.create`; the audit event each move
writes is `recording.record`.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import cache, cached_property, partial
from typing import Any, Generic, Protocol, TypeVar

from sqlalchemy import Connection, Table

from paycore.db.engine import after_commit
from paycore.lifecycle import recording, store, transition
from paycore.lifecycle.columns import IN_DOUBT_SINCE_US, NO_FAULT, UNSCHEDULED
from paycore.lifecycle.evidence import Applied, Decision, Evidence

log = logging.getLogger(__name__)


class Item(Protocol):
    @property
    def tenant_id(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def updated_at_us(self) -> int: ...


class StateTable(Protocol):
    """A domain's `states` module: its transition table and its terminal states."""

    @property
    def TRANSITIONS(self) -> frozenset[tuple[str, str]]: ...
    @property
    def TERMINAL(self) -> frozenset[str]: ...


T = TypeVar("T", bound=Item)
NotFound = Callable[[], Exception]


def _no_effect(connection: Connection, item: Any, to_state: str, now_us: int) -> None:
    return None


def _no_columns(to_state: str, now_us: int) -> Mapping[str, Any]:
    return {}


def _same(status: str) -> str:
    return status


def _as_stored(statuses: Collection[str]) -> Collection[str]:
    return statuses


def _stays(status: str, evidence: Evidence[Any]) -> Decision:
    return Decision()


def _always(item: Any, result: Any) -> bool:
    return True


@dataclass(frozen=True)
class Machine(Generic[T]):
    """What the lifecycle needs of one kind of object. Only `object_type`, `table`, `states`
    (the domain's transition table and terminal states), `from_row`, `to_row` and `not_found`
    are required."""

    object_type: str  # "payment": the audit log's object type, the events' prefix
    table: Table
    states: StateTable
    from_row: Callable[[Mapping[Any, Any]], T]
    to_row: Callable[[T], Mapping[str, Any]]  # the row that stores an item (the repository's shape)
    not_found: NotFound  # the error a missing item is
    # The ledger effect of moving an item (as it was) to a state, in the move's transaction.
    effect: Callable[[Connection, T, str, int], None] = _no_effect
    # Columns a state sets beside the status (e.g. `sent_at_us`), given the move's time.
    columns_of: Callable[[str, int], Mapping[str, Any]] = _no_columns
    # The evidence mapping: the states evidence moves an item through, from its status.
    decide: Callable[[str, Evidence[Any]], Decision] = _stays
    # Whether a result is about this item as paycore sent it (amount, currency, ...).
    matches: Callable[[T, Any], bool] = _always
    public: Callable[[str], str] = _same  # the stored status's public name
    # Every stored value meaning one of these statuses (a retired spelling in an old row).
    spellings: Callable[[Collection[str]], Collection[str]] = _as_stored
    in_doubt: str = "in_doubt"
    counterparty: str = "processor"  # whose answer an in-doubt item waits for
    log_ids: Callable[[T], Mapping[str, str]] | None = None  # extra ids on the in-doubt line
    # The object as the tenant sees it (its API JSON): each change is published with it, as
    # an event the tenant's webhook endpoints receive (ADR 0015). None: not published.
    snapshot: Callable[[T], dict[str, Any]] | None = None
    # False for a table without the work columns (nothing sent, nothing scheduled: a manual
    # resolution's proposal): its moves set only the status and what `values` say.
    scheduled: bool = True
    # The columns a person may look an item up by, beside its id (the console's search).
    references: tuple[str, ...] = ()
    # The statuses (public names) in which an item waits on the other system's word: what a
    # person may ask about again, or resolve by hand (ADR 0016).
    waiting: frozenset[str] = frozenset({"processing", "in_doubt"})
    # When and in which statuses (stored names) an item has moved the money: the time column
    # and statuses reconciliation reads for the lines the other system should have sent.
    moved: tuple[str, tuple[str, ...]] = ("created_at_us", ("succeeded",))

    @property
    def transitions(self) -> frozenset[tuple[str, str]]:
        return self.states.TRANSITIONS

    @property
    def terminal(self) -> frozenset[str]:
        return self.states.TERMINAL

    def allowed(self, from_state: str, to_state: str) -> bool:
        return (from_state, to_state) in self.transitions

    def find(self, connection: Connection, tenant_id: str, item_id: str, *, for_update: bool = False) -> T | None:
        row = store.get(connection, self.table, tenant_id, item_id, for_update=for_update)
        return None if row is None else self.from_row(row._mapping)

    def find_any(self, connection: Connection, item_id: str, *, tenant_id: str | None) -> T | None:
        """The item with this id in `tenant_id`, or in any tenant when None (the console)."""
        row = store.get_any(connection, self.table, item_id, tenant_id)
        return None if row is None else self.from_row(row._mapping)

    def matching(
        self, connection: Connection, column: str, value: str, *, tenant_id: str | None, limit: int
    ) -> list[T]:
        """Up to `limit` items whose `column` (the id, a reference, the idempotency key) is
        `value` exactly, in `tenant_id` or in any tenant (the console's search)."""
        rows = store.matching(connection, self.table, column, value, tenant_id=tenant_id, limit=limit)
        return [self.from_row(row._mapping) for row in rows]

    def metadata_matching(
        self, connection: Connection, needle: str, *, tenant_id: str | None, window: int, limit: int
    ) -> list[tuple[str, str, str]]:
        """(tenant_id, id, metadata text) of up to `limit` of the newest `window` items whose
        metadata text holds `needle` (`store.metadata_matching`; candidates, the caller checks)."""
        rows = store.metadata_matching(connection, self.table, needle, tenant_id=tenant_id, window=window, limit=limit)
        return [(row.tenant_id, row.id, row.metadata) for row in rows]

    def find_many(
        self, connection: Connection, keys: Collection[tuple[str, str]], *, for_update: bool = False
    ) -> dict[tuple[str, str], T]:
        """The items with these (tenant_id, id) keys that exist, in one statement."""
        rows = store.get_many(connection, self.table, keys, for_update=for_update)
        return {(row.tenant_id, row.id): self.from_row(row._mapping) for row in rows}

    def between(
        self,
        connection: Connection,
        *,
        time_column: str,
        statuses: Collection[str],
        window_us: tuple[int, int],
        after: tuple[str, str] | None,
        limit: int,
    ) -> list[T]:
        """A page of the items in `statuses` (stored names) whose `time_column` falls in the
        window, over every tenant, in key order after `after` (`store.page_between`)."""
        rows = store.page_between(
            connection,
            self.table,
            time_column=time_column,
            statuses=self.spellings(statuses),
            start_us=window_us[0],
            end_us=window_us[1],
            after=after,
            limit=limit,
        )
        return [self.from_row(row._mapping) for row in rows]

    def moved_between(
        self, connection: Connection, window_us: tuple[int, int], *, after: tuple[str, str] | None, limit: int
    ) -> list[T]:
        """A page of the items, over every tenant, that moved money in the window (`moved`):
        the money paycore believes the other system moved then (reconciliation's missing lines)."""
        time_column, statuses = self.moved
        return self.between(
            connection, time_column=time_column, statuses=statuses, window_us=window_us, after=after, limit=limit
        )

    def stored(self, public_names: Collection[str]) -> list[str]:
        """Every stored value (retired spellings too) of the statuses named publicly."""
        known = {state for pair in self.transitions for state in pair}
        return sorted(self.spellings([state for state in known if self.public(state) in public_names]))

    def search(self, connection: Connection, query: store.Search) -> list[T]:
        """A page of the console's list (`store.Search`); `query.statuses` are public names."""
        if query.statuses is not None:
            query = dataclasses.replace(query, statuses=self.stored(query.statuses))
        return [self.from_row(row._mapping) for row in store.search(connection, self.table, query, self.references)]

    def faulted(self, connection: Connection, *, tenant_id: str | None, limit: int) -> list[T]:
        """The items a worker round could not move, oldest fault first (`lifecycle.faults`)."""
        return [
            self.from_row(row._mapping)
            for row in store.faulted(connection, self.table, tenant_id=tenant_id, limit=limit)
        ]

    def faulted_summary(self, connection: Connection, *, tenant_id: str | None) -> tuple[int, int | None]:
        """(count, oldest fault's time) of the items a worker round could not move."""
        return store.faulted_summary(connection, self.table, tenant_id=tenant_id)

    def summary(self, connection: Connection, status: str, *, tenant_id: str | None) -> tuple[int, int | None]:
        """(count, the oldest's time in it) of the items in `status` (public name): in doubt
        since, or last changed for any other status; of one tenant or of every one."""
        since = IN_DOUBT_SINCE_US if status == self.in_doubt else "updated_at_us"
        totals = [
            store.summary(connection, self.table, stored, since_column=since, tenant_id=tenant_id)
            for stored in self.stored([status])
        ]
        oldest = [found for _, found in totals if found is not None]
        return sum(count for count, _ in totals), min(oldest) if oldest else None

    def counts(self, connection: Connection, *, tenant_id: str | None, created_gte_us: int | None) -> dict[str, int]:
        """Items by public status, of one tenant or every one, created since `created_gte_us`."""
        found: dict[str, int] = {}
        for stored, count in store.counts_by_status(
            connection, self.table, tenant_id=tenant_id, created_gte_us=created_gte_us
        ).items():
            found[self.public(stored)] = found.get(self.public(stored), 0) + count
        return found

    def oldest_due_us(self, connection: Connection, statuses: Collection[str], *, now_us: int) -> int | None:
        """When the oldest item in `statuses` (public names) that a worker should have taken by
        now fell due: what worker lag measures."""
        return store.oldest_due_us(connection, self.table, self.stored(statuses), now_us=now_us)

    def in_doubt_summary(self, connection: Connection) -> tuple[int, int | None]:
        """(count, oldest in_doubt_since_us) over every tenant: the in-doubt gauges."""
        return store.in_doubt_summary(connection, self.table, self.in_doubt)

    def working_since_us(self, connection: Connection) -> int | None:
        """When the oldest item in `processing` (a call in flight) last changed status."""
        return store.working_since_us(connection, self.table)

    def load(self, connection: Connection, tenant_id: str, item_id: str, *, for_update: bool = False) -> T:
        item = self.find(connection, tenant_id, item_id, for_update=for_update)
        if item is None:
            raise self.not_found()
        return item

    def changes(self, item: T, to_state: str, now_us: int, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The columns a move of `item` to `to_state` writes, `values` among them: the one home of
        them (`move`, and the data plane's planners of a move, `payments/move_plan.py` and
        `payouts/cancel_plan.py`). Pure."""
        # `now_us` may predate a lock wait: never record a change as earlier than the one it follows.
        now_us = max(now_us, item.updated_at_us + 1)
        changes: dict[str, Any] = {"status": to_state, "updated_at_us": now_us}
        if self.scheduled:
            changes.update(NO_FAULT)  # a moved item is no longer stuck on a fault (lifecycle.faults)
        changes.update(values or {})
        if to_state == self.in_doubt and self.scheduled:
            changes[IN_DOUBT_SINCE_US] = now_us
        if to_state in self.terminal and self.scheduled:
            changes.update(UNSCHEDULED)
        changes.update(self.columns_of(to_state, now_us))
        return changes

    def move(
        self,
        connection: Connection,
        item: T,
        to_state: str,
        *,
        cause: str,
        actor: str,
        now_us: int,
        values: Mapping[str, Any] | None = None,
        data: dict[str, Any] | None = None,
    ) -> Applied[T]:
        """Move `item` (as loaded in this transaction) to `to_state` if the table allows it and
        nobody moved it first. `values` are further columns changed with the status."""
        if not self.allowed(item.status, to_state):
            return Applied(item, False, "stale" if item.status in self.terminal else "no_change")
        changes = self.changes(item, to_state, now_us, values)
        now_us = changes["updated_at_us"]
        moved = replaced(item, changes)  # what the UPDATE wrote: no re-read

        def record(count: int) -> None:
            self.effect(connection, item, to_state, now_us)
            recording.record(connection, self, moved, item.status, cause=cause, actor=actor, now_us=now_us, data=data)

        key, stored = {"tenant_id": item.tenant_id, "id": item.id}, self.spellings((item.status,))
        if not transition.change(
            connection,
            self.table,
            key,
            (item.status, to_state),
            transitions=self.transitions,
            record=record,
            values=changes,
            stored=stored,
        ):
            return Applied(self.load(connection, item.tenant_id, item.id), False, "lost_race")
        if to_state == self.in_doubt:
            # Written once the change has committed: never for a change rolled back, once if retried.
            after_commit(partial(_log_in_doubt, self, item, cause))
        return Applied(moved, True, "applied")

    def apply_evidence(
        self,
        connection: Connection,
        item: T,
        evidence: Evidence[Any],
        *,
        cause: str,
        actor: str,
        now_us: int,
        values: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Applied[T]:
        """Move `item` (as loaded, row-locked, in this transaction) as far as `evidence` proves.
        `values` (e.g. the worker's schedule) are written with every move; `data` is added to each
        move's audit data (e.g. a manual resolution's people and note). A late answer can prove
        several steps at once: each is applied and recorded in order, with its cause."""
        decision = self.decide(item.status, evidence)
        if not decision.path:
            return Applied(item, False, "no_change")
        if evidence.result is not None and not self.matches(item, evidence.result):
            return Applied(item, False, "mismatch")  # never applied: the call or webhook is in the log
        if not self.allowed(item.status, decision.path[0]):
            return Applied(item, False, "stale" if item.status in self.terminal else "no_change")
        changed = False
        for step in decision.path:
            moved = self.move(
                connection,
                item,
                step,
                cause=cause,
                actor=actor,
                now_us=now_us,
                values={**decision.values, **(values or {})},
                data={**(decision.data or {}), **data} if data else decision.data,
            )
            if not moved.changed:
                return Applied(moved.item, changed, "applied" if changed else moved.reason)
            item, changed = moved.item, True
        return Applied(item, True, "applied")


def replaced(item: T, changes: Mapping[str, Any]) -> T:
    """`item` with the columns it carries set as `changes` wrote them: `dataclasses.replace`'s
    result. A type whose `__init__` only stores its fields (`_stores_only`: every item type the
    lifecycle drives) is copied by its attributes instead of built again through it, which
    checks and passes each of a payment's 36 fields (a settle's planning moves one a phase)."""
    kind = type(item)
    names = _field_names(kind)
    kept = {name: value for name, value in changes.items() if name in names}
    if not _stores_only(kind):
        return dataclasses.replace(item, **kept)  # type: ignore[type-var]
    moved = object.__new__(kind)
    attributes = moved.__dict__
    attributes.update(item.__dict__)
    attributes.update(kept)
    return moved


@cache
def _field_names(kind: type) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(kind))


@cache
def _stores_only(kind: type) -> bool:
    """Whether `kind`'s `__init__` takes exactly its fields and nothing else runs
    after it stores them (no `__post_init__`; an `InitVar` would be a parameter more), and its
    instances keep their fields in `__dict__` (no `__slots__`)."""
    if hasattr(kind, "__post_init__") or hasattr(kind, "__slots__"):
        return False
    if any(isinstance(value, cached_property) for base in kind.__mro__ for value in vars(base).values()):
        return False  # a value cached in `__dict__` would be copied with the fields
    fields = dataclasses.fields(kind)
    names = {field.name for field in fields if field.init}
    parameters = inspect.signature(kind).parameters
    return len(names) == len(fields) == len(parameters) and names == parameters.keys()


def _log_in_doubt(machine: Machine[T], item: T, cause: str) -> None:
    kind = machine.object_type
    log.warning(
        "%s %s is in doubt: its outcome at the %s is not known",
        kind,
        item.id,
        machine.counterparty,
        extra={
            "event": "in_doubt",
            "kind": kind,
            f"{kind}_id": item.id,
            "tenant_id": item.tenant_id,
            **(machine.log_ids(item) if machine.log_ids else {}),
            "from_state": machine.public(item.status),
            "cause": cause,
        },
    )
