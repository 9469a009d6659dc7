"""What paycore's app hands to a worker thread, counted by name: the proof that a thin edge's
path from the event loop takes none (ADR 0026 decision 4). A test asks for the `submitted`
fixture (registered by `tests/conftest.py`), clears it after a warm-up request, and reads it."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio.to_thread
import pytest

from paycore.kit import threads


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The functions paycore's app handed to a worker thread, by name: to `kit.threads`' pool
    (`run_blocking`) or to anyio's (`anyio.to_thread.run_sync`, FastAPI's sync routes and
    dependencies); the sandbox's own server (thread `test-server`) left out."""
    names: list[str] = []

    def note(function: Callable[..., Any]) -> None:
        if threading.current_thread().name != "test-server":
            names.append(_name(function))

    class Counted(ThreadPoolExecutor):
        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            note(fn)
            return super().submit(fn, *args, **kwargs)

    real_run_sync = anyio.to_thread.run_sync

    async def run_sync(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        note(function)
        return await real_run_sync(function, *args, **kwargs)

    pool = Counted(max_workers=threads.THREADS_MAX, thread_name_prefix="paycore-blocking-counted")
    monkeypatch.setattr(threads, "_POOL", pool)
    monkeypatch.setattr(anyio.to_thread, "run_sync", run_sync)
    yield names
    pool.shutdown(wait=True)


def _name(function: Any) -> str:
    """A function's name through `functools.partial` and `contextvars.Context.run`."""
    while isinstance(function, functools.partial):
        function = function.args[0] if getattr(function.func, "__name__", "") == "run" else function.func
    return str(getattr(function, "__name__", repr(function)))
