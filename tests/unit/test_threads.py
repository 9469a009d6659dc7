"""`kit.threads.run_blocking`: what the money path kept from anyio's thread hop."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from paycore.kit.threads import run_blocking

_NAMED: contextvars.ContextVar[str] = contextvars.ContextVar("named", default="none")


def test_the_function_runs_on_another_thread_with_the_callers_context() -> None:
    async def main() -> tuple[str, int]:
        _NAMED.set("req_1")
        return await run_blocking(lambda: (_NAMED.get(), threading.get_ident()))

    named, thread = asyncio.run(main())
    assert named == "req_1"
    assert thread != threading.get_ident()


def test_the_functions_exception_is_the_callers() -> None:
    def refuse(amount_minor: int) -> None:
        raise ValueError(f"refused {amount_minor}")

    with pytest.raises(ValueError, match="refused 7"):
        asyncio.run(run_blocking(refuse, 7))


def test_a_cancelled_caller_waits_for_the_function_to_return() -> None:
    finished: list[float] = []

    def slow() -> None:
        time.sleep(0.2)
        finished.append(time.monotonic())

    async def main() -> float:
        task = asyncio.create_task(run_blocking(slow))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic()

    cancelled_at = asyncio.run(main())
    assert finished, "the function ran to its end"
    assert finished[0] <= cancelled_at, "the caller's cancellation came after the function returned"
