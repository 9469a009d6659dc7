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
