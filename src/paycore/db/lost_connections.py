"""A connection lost takes every connection its pool opened before it along (ADR 0007).

A server that dropped one connection dropped all it had (a restart, a failover, a dead host).
On a disconnect SQLAlchemy Core marks its pool so that every connection opened before is
replaced at its next checkout rather than failing its next statement. The driver's statements
(`db/driver.py`) do not pass through SQLAlchemy's error handling, so this does the same for
them with SQLAlchemy's public pool events: from an engine's first lost connection on, a
`connect` listener stamps each new connection's opening time in its `info`, and a `checkout`
listener refuses every connection opened before the engine's last loss (a `DisconnectionError`,
on which the pool opens a new one). A connection without a stamp was opened before the first
loss. Until a connection is lost, nothing is listened to: no cost on any checkout.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DisconnectionError

_OPENED_AT = "paycore_opened_at_s"  # in a DBAPI connection's `info`: time.monotonic() at its opening


class _Losses:
    """An engine's last loss, and the listeners that act on it."""

    def __init__(self, engine: Engine) -> None:
        self.lost_at_s: float | None = None
        event.listen(engine, "connect", self._opened)
        event.listen(engine, "checkout", self._refuse_if_older)

    def lost(self, opened_at_s: float | None) -> None:
        """As SQLAlchemy's pool does: the mark moves to now unless the lost connection was
        opened before the last mark (then every connection it could take along already went)."""
        if self.lost_at_s is None or (opened_at_s is not None and self.lost_at_s < opened_at_s):
            self.lost_at_s = time.monotonic()

    def _opened(self, _dbapi_connection: Any, record: Any) -> None:
        record.info[_OPENED_AT] = time.monotonic()

    def _refuse_if_older(self, _dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        opened_at_s = record.info.get(_OPENED_AT)
        lost_at_s = self.lost_at_s
        assert lost_at_s is not None, "listened to from the first loss on"
        if opened_at_s is None or opened_at_s < lost_at_s:
            raise DisconnectionError("opened before a connection of this pool was lost")


_losses: weakref.WeakKeyDictionary[Engine, _Losses] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def lost(connection: Connection, error: BaseException) -> None:
    """`connection` was found lost while it ran a statement: it is closed and never handed out
    again, and neither is any connection its pool opened before this moment."""
    assert not connection.invalidated, "found lost by a statement just run on it"
    lost_beside(connection.engine, connection.info.get(_OPENED_AT))
    connection.invalidate(error)


def lost_beside(engine: Engine, opened_at_s: float | None) -> None:
    """A connection to `engine`'s server opened at `opened_at_s` (`time.monotonic()`; None:
    before the first loss) was found lost, by `engine`'s pool or beside it (the event loop's,
    `db/loop_calls.py`): every connection either opened before it goes too."""
    with _lock:
        losses = _losses.get(engine)
        if losses is None:
            losses = _losses[engine] = _Losses(engine)
        losses.lost(opened_at_s)


def lost_at_s(engine: Engine) -> float | None:
    """The `time.monotonic()` of `engine`'s last loss (`lost`, `lost_beside`); None: none yet.
    A connection opened before it is not handed out again."""
    losses = _losses.get(engine)
    return None if losses is None else losses.lost_at_s
