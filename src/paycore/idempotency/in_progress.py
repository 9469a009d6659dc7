"""Which keys this process holds open, to word an answer (`service.run`, `write` and their
loop forms): a duplicate that waited past its bound is told "in progress" while its first
request is still running here, else "busy". Never the rule of who executes: the database is."""

from __future__ import annotations

import asyncio
import threading

from paycore.db.engine import Database
from paycore.idempotency.keys import KeyScope


class ClaimsInProgress:
    """Keys this process has claimed in a transaction that has not ended yet.

    Only used to word an answer: on SQLite every writer waits at the one write lock, so a
    duplicate that waited past the bound cannot learn from the database that its first request
    is still running (PostgreSQL tells it, by making it wait on the key's row). Correctness
    never rests on this: the database decides who executes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owners: dict[tuple[str, str], object] = {}

    def claim(self, scope: KeyScope, owner: object) -> None:
        with self._lock:
            self._owners[(scope.tenant_id, scope.key)] = owner

    def release(self, scope: KeyScope, owner: object) -> None:
        with self._lock:
            if self._owners.get((scope.tenant_id, scope.key)) is owner:
                del self._owners[(scope.tenant_id, scope.key)]

    def running_elsewhere(self, scope: KeyScope, owner: object) -> bool:
        """True if another request of this process holds an open claim on the key."""
        found = self._owners.get((scope.tenant_id, scope.key))
        return found is not None and found is not owner


IN_PROGRESS = ClaimsInProgress()


class HeldAtTheBound:
    """For a caller on the event loop: whether another request of this process held the key
    open when this one's wait for SQLite's write lock passed its bound (`idempotency_wait_ms`),
    the moment a waiting thread (`run`, `write`) looks. A submitted call's `GroupTimeout` is
    told by the leader that takes it, after the group before it has committed: by then that
    group's request may have ended, and "busy" would answer a duplicate that waited behind it.
    On PostgreSQL a wait past its bound ends the call itself: looked at then."""

    def __init__(self, database: Database, scope: KeyScope, owner: object) -> None:
        self.scope, self.owner = scope, owner
        self._seen: bool | None = None
        self._timer: asyncio.TimerHandle | None = None
        if not database.is_postgres:
            wait_s = database.settings.idempotency_wait_ms / 1000
            self._timer = asyncio.get_running_loop().call_later(wait_s, self._look)

    def _look(self) -> None:
        self._seen = IN_PROGRESS.running_elsewhere(self.scope, self.owner)

    def __call__(self) -> bool:
        return IN_PROGRESS.running_elsewhere(self.scope, self.owner) if self._seen is None else self._seen

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
