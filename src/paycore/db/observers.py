"""Who watches the statements paycore sends to a database: the statement counts and plan
checks of the tests, the benchmarks' statement lists (ADR 0007).

The money path's statements run on the driver's own cursor (`db/driver.py`), which SQLAlchemy's
events never see; everything else runs through SQLAlchemy Core, whose public
`before_cursor_execute` event does. An observer subscribed here sees both, each statement
once: the driver hands its own to `notify`, and a listener of that event, registered while an
engine has observers, hands on Core's. With no observer anywhere the driver pays one check of
an empty dict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event

# (sql, parameters, executemany): parameters is a list of parameter sets when executemany.
Observer = Callable[[str, Any, bool], None]
_Listener = Callable[..., None]

# Observers by engine, replaced whole under the lock and never changed in place, so that a reader
# needs no lock (read it as `observers.OBSERVED`). Empty whenever nothing observes.
OBSERVED: dict[Engine, tuple[Observer, ...]] = {}
_core_listeners: dict[Engine, _Listener] = {}
_lock = threading.Lock()


@contextmanager
def observing(engine: Engine, observer: Observer) -> Iterator[None]:
    """`observer` sees every statement run on `engine` inside the block, on any thread."""
    _add(engine, observer)
    try:
        yield
    finally:
        _remove(engine, observer)


def notify(engine: Engine, sql: str, parameters: Any, executemany: bool = False) -> None:
    """A statement about to run on `engine`, to each of its observers."""
    for observer in OBSERVED.get(engine, ()):
        observer(sql, parameters, executemany)


def _add(engine: Engine, observer: Observer) -> None:
    global OBSERVED
    with _lock:
        found = OBSERVED.get(engine, ())
        assert observer not in found, "an observer is subscribed once"
        if not found:
            _core_listeners[engine] = _core_listener(engine)
            event.listen(engine, "before_cursor_execute", _core_listeners[engine])
        OBSERVED = {**OBSERVED, engine: (*found, observer)}


def _remove(engine: Engine, observer: Observer) -> None:
    global OBSERVED
    with _lock:
        left = tuple(each for each in OBSERVED[engine] if each is not observer)
        observed = dict(OBSERVED)
        if left:
            observed[engine] = left
        else:
            del observed[engine]
            event.remove(engine, "before_cursor_execute", _core_listeners.pop(engine))
        OBSERVED = observed


def _core_listener(engine: Engine) -> _Listener:
    """SQLAlchemy Core's statements on `engine` (and on engines sharing its events) to its
    observers: SQLAlchemy's public event, which never sees the driver's."""

    def before_cursor_execute(
        _connection: Any, _cursor: Any, sql: str, parameters: Any, _context: Any, executemany: bool
    ) -> None:
        notify(engine, sql, parameters, executemany)

    return before_cursor_execute
