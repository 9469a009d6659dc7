"""The worker loop (issue 18 point 4): a job that raises is a `job_failed` line with the job's
name, and the round goes on with the other jobs; each job's run has its own `job_` id."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from paycore.config import Settings
from paycore.kit import logs
from paycore.workers import loop
from paycore.workers.jobs import WorkerContext


def test_a_failing_job_is_logged_by_name_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, str | None]] = []

    def broken(context: Any) -> int:
        seen.append(("broken", logs.request_id()))
        raise RuntimeError("database gone")

    def working(context: Any) -> int:
        seen.append(("working", logs.request_id()))
        return 3

    jobs = (("broken_job", broken, lambda s: 10), ("working_job", working, lambda s: 10))
    monkeypatch.setattr(loop, "JOBS", jobs)
    context = WorkerContext(cast(Any, None), Settings(), cast(Any, None), "worker-1", cast(Any, None))
    caplog.set_level(logging.INFO)

    result = loop.run_once(context)

    assert result.done == {"working_job": 3}
    assert result.failed == ["broken_job"]
    assert [name for name, _ in seen] == ["broken", "working"]
    ids = [request_id for _, request_id in seen]
    assert all(request_id is not None and request_id.startswith("job_") for request_id in ids)
    assert ids[0] != ids[1]
    assert logs.request_id() is None  # reset after each job
    [failed] = [record for record in caplog.records if getattr(record, "event", None) == "job_failed"]
    assert failed.job == "broken_job"  # type: ignore[attr-defined]
    assert failed.worker_id == "worker-1"  # type: ignore[attr-defined]
    assert failed.error_type == "RuntimeError"  # type: ignore[attr-defined]
    assert failed.exc_info is not None


def test_a_database_outage_stops_the_round_without_a_job_failed_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29: while the database cannot be reached every job would fail the same way; the
    round stops at the first, and the outage is the database's two lines, not one per job."""
    from paycore.db.availability import DatabaseUnavailable

    seen: list[str] = []

    def away(context: Any) -> int:
        seen.append("away")
        raise DatabaseUnavailable("the database cannot be reached: connection refused")

    def next_job(context: Any) -> int:
        seen.append("next")
        return 0

    monkeypatch.setattr(loop, "JOBS", (("first", away, lambda s: 10), ("second", next_job, lambda s: 10)))
    context = WorkerContext(cast(Any, None), Settings(), cast(Any, None), "worker-1", cast(Any, None))
    caplog.set_level(logging.INFO)

    result = loop.run_once(context)

    assert result.unavailable
    assert (result.done, result.failed, seen) == ({}, [], ["away"])
    assert not [record for record in caplog.records if getattr(record, "event", None) == "job_failed"]


def test_the_wait_while_the_database_is_away_doubles_with_jitter_up_to_its_bound() -> None:
    import random

    from paycore.config import DATABASE_RETRY_BACKOFF_MAX_MS, DATABASE_RETRY_BACKOFF_MS
    from paycore.workers.retry import DatabaseRetry

    retry = DatabaseRetry(rng=random.Random(7))
    waits_ms = [int(retry.next_wait_s() * 1000) for _ in range(12)]
    assert DATABASE_RETRY_BACKOFF_MS // 2 <= waits_ms[0] <= DATABASE_RETRY_BACKOFF_MS
    assert all(DATABASE_RETRY_BACKOFF_MAX_MS // 2 <= wait <= DATABASE_RETRY_BACKOFF_MAX_MS for wait in waits_ms[6:])
    assert len(set(waits_ms[6:])) > 1  # jitter: a fleet of workers does not come back in step
    retry.reset()
    assert int(retry.next_wait_s() * 1000) <= DATABASE_RETRY_BACKOFF_MS
