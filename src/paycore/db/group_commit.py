"""Group commit for SQLite: the write transactions that queue in one process while another
commits run together, under one BEGIN IMMEDIATE ... COMMIT.

SQLite has one writer, and with `synchronous=FULL` every COMMIT waits for an fsync of the WAL
(about 1 ms on this project's machines, the largest single cost of a small transaction). A
process serving many requests queued them one behind the other, each paying its own BEGIN,
fsync and connection checkout. Here the first caller to find no group running becomes the
*leader*: it takes the queued calls (its own first, at most `GROUP_TRANSACTIONS_MAX`), runs
them one after another in one transaction, commits once, and hands each caller its own result
or exception. The others wait (bounded) and return what the leader handed them.

What each caller sees is what a transaction of its own would give it (docs/adr/0008):

- **Atomic per caller.** A group first runs with no savepoint between its calls (two
  statements fewer per call). If a call raises, the whole group is rolled back and runs again
  with each call inside `SAVEPOINT`, where `ROLLBACK TO` undoes exactly the writes of a call
  that raises and the others go on; that call gets its exception back. (A call alone in its
  group needs no savepoint: its exception rolls the whole transaction back.) A call may so
  run twice, which `Database.transaction` already allows: its work may be retried.
- **Durable before answered.** No caller is answered before the COMMIT that holds its writes
  has returned. If BEGIN or COMMIT fails, or SQLite abandons the transaction, every caller of
  the group gets the error: none of them was acknowledged, none of them committed.
- **Serial.** Calls run one at a time in queue order, each seeing the writes of those before
  it, exactly as if they had committed one after another. So an idempotency key claimed by one
  call is found by a duplicate later in the same group, which replays it.
- **Bounded wait.** A call still queued after `wait_s` is taken out of the queue, never runs,
  and raises `DatabaseBusy`. A call that has started always finishes.

Callers that must not block (the event loop of an `async` endpoint) `submit` instead of `run`:
their call joins the same queue, and when no caller leads, this committer's *writer thread*
(started on the first `submit`) leads for them. Each submitted call's `on_done` is called on
the leading thread once its group has committed or failed, outside the queue's lock. A
submitted call still queued past its bound is failed with `GroupTimeout` by the leader that
takes it, without running. A group whose calls all name one `run_on` has its statements run
through it, on the caller's event loop (`paycore.db.event_loop`, docs/adr/0012).

Correctness across processes still rests on SQLite's write lock, taken by BEGIN IMMEDIATE;
the queue and the leader are scheduling within one process. PostgreSQL does not use this:
its transactions commit concurrently and its WAL flushes are already grouped by the server.
"""

from __future__ import annotations

import logging
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
log = logging.getLogger(__name__)

GROUP_TRANSACTIONS_MAX = 64
_CLOSE_WAIT_S = 10.0  # how long `close` waits for the writer thread to drain the queue
_RETIRED_POLL_S = 0.05
_SAVEPOINT = driver.statement("SAVEPOINT paycore_group")
_RELEASE = driver.statement("RELEASE SAVEPOINT paycore_group")
_ROLLBACK_TO = driver.statement("ROLLBACK TO SAVEPOINT paycore_group")

# Runs a function to its end on some thread (an event loop's) and returns or raises as it did.
Runner = Callable[[Callable[[], None]], None]


class GroupTimeout(Exception):
    """The call waited in the queue past its bound and was not run."""


@dataclass(eq=False)
class _Call(Generic[T]):
    work: Callable[[Connection], T]
    deadline_s: float  # time.monotonic() past which a queued call is not run
    on_done: Callable[[_Call[T]], None] | None = None
    run_on: Runner | None = None
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
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Two conditions over the one lock: the callers waiting for their call (`run`) and the
    # writer thread waiting for work. Each is woken only for what it waits for: a COMMIT that
    # answers waiting callers does not wake the writer thread to find the queue empty (a
    # thread switch, and a turn at the interpreter lock, per transaction of this process).
    _condition: threading.Condition = field(init=False)
    _work: threading.Condition = field(init=False)
    _queue: deque[_Call[Any]] = field(default_factory=deque)
    _leading: bool = False
    _writer: threading.Thread | None = None
    groups_committed: int = 0  # for tests and diagnostics

    def __post_init__(self) -> None:
        self._condition = threading.Condition(self._lock)
        self._work = threading.Condition(self._lock)

    def run(self, work: Callable[[Connection], T], wait_s: float) -> T:
        deadline = time.monotonic() + wait_s
        call: _Call[T] = _Call(work, deadline_s=deadline)
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
                self._end_leading()
        return call.outcome()

    def submit(
        self,
        work: Callable[[Connection], T],
        wait_s: float,
        on_done: Callable[[_Call[T]], None],
        run_on: Runner | None = None,
    ) -> None:
        """Queue `work` without waiting; `on_done(call)` gets it back done (`call.outcome()`).

        Never blocks beyond the queue's lock: whoever leads takes it, and when nobody leads
        the writer thread does. A group whose calls all name one `run_on` has its statements
        run through it (the BEGIN and the COMMIT stay on the leader's thread)."""
        call: _Call[T] = _Call(work, time.monotonic() + wait_s, on_done, run_on)
        with self._condition:
            self._queue.append(call)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_forever, name="paycore-writer", daemon=True)
                self._writer.start()
            if not self._leading:  # a leader takes it; else the writer thread leads for it
                self._work.notify()

    def close(self) -> None:
        """Stop the writer thread once the queue is empty (for `Database.dispose`); a later
        `submit` starts another."""
        with self._condition:
            writer, self._writer = self._writer, None
            self._work.notify_all()
        if writer is not None and writer is not threading.current_thread():
            writer.join(timeout=_CLOSE_WAIT_S)

    def queued(self) -> int:
        """Calls waiting for a leader (for tests)."""
        with self._condition:
            return len(self._queue)

    def _write_forever(self) -> None:
        """The writer thread: lead whenever calls are queued and nobody else leads; end once
        `close` has replaced it and the queue is empty."""
        while True:
            with self._condition:
                while not self._queue or self._leading:
                    retired = self._writer is not threading.current_thread()
                    if retired and not self._queue:
                        return
                    # Retired (`close`) while another thread leads: look again now and then,
                    # since that leader wakes this condition only for calls it leaves queued.
                    self._work.wait(_RETIRED_POLL_S if retired else None)
                self._leading = True
            while True:
                with self._condition:
                    if not self._queue:  # checked and released under one lock: no call is stranded
                        self._end_leading()
                        break
                self._lead()

    def _end_leading(self) -> None:
        """Under the lock: nobody leads now. The waiting callers look again (one of them may
        lead its own call), and the writer thread is woken if calls are left queued (a leader
        in `run` stops once its own call is done)."""
        self._leading = False
        self._condition.notify_all()
        if self._queue:
            self._work.notify()

    def _lead(self) -> None:
        expired: list[_Call[Any]] = []
        group: list[_Call[Any]] = []
        with self._condition:
            now = time.monotonic()
            while self._queue and len(group) < GROUP_TRANSACTIONS_MAX:
                call = self._queue.popleft()
                call.taken = True
                # A waiting caller times itself out; a submitted one has nobody waiting to.
                (expired if call.on_done is not None and call.deadline_s < now else group).append(call)
        for call in expired:
            call.error = GroupTimeout("the database's write lock did not become free in time")
        self._finish(expired)
        if not group:
            return
        try:
            try:
                self._commit(group, isolated=len(group) == 1)
            except _RunAgainIsolated:
                self._commit(group, isolated=True)
        except BaseException as error:  # the work of a lone call, BEGIN, COMMIT or a lost transaction
            for call in group:
                call.result, call.error = None, error
        else:
            self.groups_committed += 1
        self._finish(group)

    def _commit(self, group: list[_Call[Any]], *, isolated: bool) -> None:
        run_on = _shared_runner(group)
        with self.open_transaction() as connection:
            if run_on is None:
                _execute(connection, group, isolated)
            else:
                run_on(lambda: _execute(connection, group, isolated))

    def _finish(self, calls: list[_Call[Any]]) -> None:
        if not calls:
            return
        with self._condition:
            for call in calls:
                call.done = True
            self._condition.notify_all()
        for call in calls:
            if call.on_done is not None:
                try:
                    call.on_done(call)
                except Exception:  # the caller is gone (its event loop closed): nothing to answer
                    log.exception("a submitted call's completion could not be delivered")


class _RunAgainIsolated(Exception):
    """A call of a group run without savepoints raised: roll the group back, run it again."""


def _shared_runner(group: list[_Call[Any]]) -> Runner | None:
    """Where the group's statements run: through the one runner every call names, or (None)
    on the leader's own thread."""
    first = group[0].run_on
    return first if first is not None and all(call.run_on == first for call in group) else None


def _execute(connection: Connection, group: list[_Call[Any]], isolated: bool) -> None:
    """Run the group's calls in order: `isolated`, each in its own savepoint (or alone), so an
    exception undoes its own writes and goes to its caller; otherwise with no savepoint, and
    the first exception sends the whole group round again, isolated."""
    if len(group) == 1:
        # Alone: no savepoint needed, an exception rolls the transaction back.
        group[0].result = group[0].work(connection)
    elif isolated:
        for call in group:
            _run_in_savepoint(connection, call)
    else:
        try:
            for call in group:
                call.result = call.work(connection)
        except Exception as error:
            raise _RunAgainIsolated from error


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
