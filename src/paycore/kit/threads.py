"""Blocking work from an event loop: one process-wide pool of threads, reached through asyncio's
own executor hand-off.

`anyio.to_thread.run_sync` cost a money request 38-56 µs a hop on this project's machines (its
capacity limiter, cancel scope and a worker thread of its own, per call), the plain executor
hop 17 µs (docs/benchmarks.md). `run_blocking` keeps what the money path relied on from anyio:

- the caller's context variables (the request id, the audit context) are the function's, as
  `anyio.to_thread.run_sync` copies them;
- at most `THREADS_MAX` calls run at once (anyio's default limiter: 40), the others queue;
- a cancelled caller (the server shutting down) is cancelled only once its function has
  returned: the thread's work (a write, a processor call) is never abandoned half-way by the
  task that asked for it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

THREADS_MAX: Final = 40  # what anyio's default thread limiter allowed the same calls

_POOL: Final = ThreadPoolExecutor(max_workers=THREADS_MAX, thread_name_prefix="paycore-blocking")


async def run_blocking(function: Callable[P, T], *arguments: P.args, **keywords: P.kwargs) -> T:
    """`function(*arguments, **keywords)` on one of the pool's threads, in a copy of the
    caller's context; its result or its exception."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, function, *arguments, **keywords)
    return await _to_end(loop.run_in_executor(_POOL, call))


async def run_to_end(work: Coroutine[Any, Any, T]) -> T:
    """`work` as a task of its own, which the caller's cancellation never stops half-way (as
    `run_blocking`'s function): the event loop's own share of a money request (a processor
    call and the write that records it) is finished as a worker thread's would be."""
    return await _to_end(asyncio.ensure_future(work))


async def _to_end(future: asyncio.Future[T]) -> T:
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        # As anyio's run_sync: the caller's cancellation waits for the work to end.
        while not future.done():
            try:
                await asyncio.wait([future])
            except asyncio.CancelledError:
                continue
        raise
