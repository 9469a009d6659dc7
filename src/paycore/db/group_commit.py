"""Group commit for SQLite: the write transactions that queue in one process while another
commits run together, each in its own savepoint, under one BEGIN IMMEDIATE ... COMMIT.

SQLite has one writer, and with `synchronous=FULL` every COMMIT waits for an fsync of the WAL
(about 1 ms on this project's machines, the largest single cost of a small transaction). A
process serving many requests queued them one behind the other, each paying its own BEGIN,
fsync and connection checkout. Here the first caller to find no group running becomes the
*leader*: it takes the queued calls (its own first, at most `GROUP_TRANSACTIONS_MAX`), runs
them one after another in one transaction, commits once, and hands each caller its own result
or exception. The others wait (bounded) and return what the leader handed them.

What each caller sees is what a transaction of its own would give it (docs/adr/0008):

- **Atomic per caller.** Each call runs inside `SAVEPOINT`; if it raises, `ROLLBACK TO` undoes
  exactly its writes and the others go on. It gets its exception back. (A call alone in its
  group needs no savepoint: its exception rolls the whole transaction back.)
- **Durable before answered.** No caller is answered before the COMMIT that holds its writes
  has returned. If BEGIN or COMMIT fails, or SQLite abandons the transaction, every caller of
  the group gets the error: none of them was acknowledged, none of them committed.
- **Serial.** Calls run one at a time in queue order, each seeing the writes of those before
  it, exactly as if they had committed one after another. So an idempotency key claimed by one
  call is found by a duplicate later in the same group, which replays it.
- **Bounded wait.** A call still queued after `wait_s` is taken out of the queue, never runs,
  and raises `DatabaseBusy`. A call that has started always finishes.

Correctness across processes still rests on SQLite's write lock, taken by BEGIN IMMEDIATE;
the queue and the leader are scheduling within one process. PostgreSQL does not use this:
its transactions commit concurrently and its WAL flushes are already grouped by the server.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from paycore.db import driver

T = TypeVar("T")

GROUP_TRANSACTIONS_MAX = 64
_SAVEPOINT = driver.statement("SAVEPOINT paycore_group")
_RELEASE = driver.statement("RELEASE SAVEPOINT paycore_group")
_ROLLBACK_TO = driver.statement("ROLLBACK TO SAVEPOINT paycore_group")


class GroupTimeout(Exception):
    """The call waited in the queue past its bound and was not run."""


@dataclass(eq=False)
class _Call(Generic[T]):
    work: Callable[[Connection], T]
    taken: bool = False
    done: bool = False
    result: Any = None
    error: BaseException | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[no-any-return]


@dataclass(eq=False)
class GroupCommitter:
    """One per `Database` (SQLite). `open_transaction()` returns a context manager giving a
    Connection inside BEGIN IMMEDIATE that commits on a clean exit."""

    open_transaction: Callable[[], AbstractContextManager[Connection]]
    _condition: threading.Condition = field(default_factory=threading.Condition)
    _queue: deque[_Call[Any]] = field(default_factory=deque)
    _leading: bool = False
    groups_committed: int = 0  # for tests and diagnostics

    def run(self, work: Callable[[Connection], T], wait_s: float) -> T:
        call: _Call[T] = _Call(work)
        deadline = time.monotonic() + wait_s
        with self._condition:
            self._queue.append(call)
            while self._leading and not call.done:
                remaining = deadline - time.monotonic()
                if remaining <= 0 and not call.taken:
                    self._queue.remove(call)
                    raise GroupTimeout("the database's write lock did not become free in time")
                self._condition.wait(timeout=remaining if remaining > 0 else None)
            if call.done:
                return call.outcome()
            self._leading = True
        try:
            while not call.done:
                self._lead()
        finally:
            with self._condition:
                self._leading = False
                self._condition.notify_all()
        return call.outcome()

    def queued(self) -> int:
        """Calls waiting for a leader (for tests)."""
        with self._condition:
            return len(self._queue)

    def _lead(self) -> None:
        with self._condition:
            group = [self._queue.popleft() for _ in range(min(len(self._queue), GROUP_TRANSACTIONS_MAX))]
            for call in group:
                call.taken = True
        try:
            with self.open_transaction() as connection:
                if len(group) == 1:
                    # Alone: no savepoint needed, an exception rolls the transaction back.
                    group[0].result = group[0].work(connection)
                else:
                    for call in group:
                        _run_in_savepoint(connection, call)
        except BaseException as error:  # the work of a lone call, BEGIN, COMMIT or a lost transaction
            for call in group:
                call.result, call.error = None, error
        else:
            self.groups_committed += 1
        with self._condition:
            for call in group:
                call.done = True
            self._condition.notify_all()


def _run_in_savepoint(connection: Connection, call: _Call[Any]) -> None:
    driver.execute(connection, _SAVEPOINT, ())
    try:
        call.result = call.work(connection)
    except BaseException as error:
        call.error = error
        # Raises if SQLite abandoned the whole transaction (a full disk, an I/O error): then
        # the group fails as a whole, above, and every caller gets that error.
        driver.execute(connection, _ROLLBACK_TO, ())
    driver.execute(connection, _RELEASE, ())
