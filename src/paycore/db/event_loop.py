"""Running a SQLite write group's statements on the event loop its callers await on (ADR 0012).

Python's `sqlite3` releases the interpreter lock around every statement and takes it back
after. A writer thread that runs a group's statements while the event loop parses requests
therefore queues for the lock once per statement, behind a thread that gives it up only every
switch interval (5 ms): measured by hand, a thread writing credits in groups of 16 did 4,914
credits/s alone and 18/s beside one busy Python thread. So the statements of a group whose
callers are all on one loop run *on that loop*, one group at a time, while the leader's
thread keeps what blocks: `BEGIN IMMEDIATE` (which may wait for another process's write
lock) and the `COMMIT`'s fsync. The loop is busy for the statements' CPU time, which it would
have spent waiting for the lock anyway, and never waits on a lock or a disk flush.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

_LOOP_CHECK_S = 0.1  # how often a waiting leader checks that the loop still runs


@dataclass(frozen=True)
class LoopRunner:
    """A `group_commit.Runner` for one event loop; equal for equal loops, so the calls of
    one loop form groups that run together."""

    loop: asyncio.AbstractEventLoop

    def __call__(self, function: Callable[[], None]) -> None:
        handoff = _Handoff(function)
        try:
            self.loop.call_soon_threadsafe(handoff.run)
        except RuntimeError:  # the loop is closed: nobody else will run it
            handoff.run()
        handoff.wait(self.loop)


class _Handoff:
    """`function`, run exactly once: by the loop, or by the waiting thread if the loop stops
    before it got to it."""

    def __init__(self, function: Callable[[], None]) -> None:
        self.function = function
        self._lock = threading.Lock()
        self._claimed = False
        self._done = threading.Event()
        self._error: BaseException | None = None

    def run(self) -> None:
        with self._lock:
            if self._claimed:
                return
            self._claimed = True
        try:
            self.function()
        except BaseException as error:  # handed to the waiting thread
            self._error = error
        finally:
            self._done.set()

    def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        while not self._done.wait(_LOOP_CHECK_S):
            if loop.is_closed() or not loop.is_running():
                self.run()  # a no-op if the loop got to it first
        if self._error is not None:
            raise self._error
