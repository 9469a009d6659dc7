"""The one database PAYCORE_TEST_CITUS_URL names is shared by the Citus-only test modules
(tests/integration/db/test_citus_*.py): each migrates, distributes and writes to it. Run by
xdist on two workers they would race (one distributing while another writes), so each holds
this lock, a file lock across processes, while it uses the database."""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def held(url: str) -> Iterator[None]:
    name = hashlib.sha256(url.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"paycore-citus-{name}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
