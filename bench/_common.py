"""Helpers shared by the benchmarks: machine facts, PostgreSQL scratch databases, Markdown.

Nothing here measures anything; it only describes the machine and formats results, so that
every benchmark prints the same header (what ran, where, when, how busy the machine was).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
import secrets
import shlex
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"  # git-ignored
DEFAULT_POSTGRES_URL = os.environ.get("PAYCORE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
# Outside local mode paycore needs the key of its secrets at rest (docs/adr/0018-secrets-at-rest.md);
# the benchmarks' scratch databases share this one, unless one is set (every process inherits it).
os.environ.setdefault("PAYCORE_SECRETS_KEY", "YmVuY2gtb25seS1rZXktbmV2ZXItZm9yLXJlYWwtdXM=")

if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))  # run from a fresh clone without `pip install -e .`


# ---------------------------------------------------------------------------- machine facts


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def filesystem_of(path: Path) -> str:
    """The mount (device, type) holding `path`: fsync on tmpfs is free, so say which it is."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    target = str(path.resolve())
    best = ("", "unknown", "unknown")
    for device, mount_point, fs_type, *_ in mounts:
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best[0]):
            best = (mount_point, fs_type, device)
    return f"{best[1]} ({best[2]} on {best[0]})"


def fsync_probe(directory: Path, writes: int = 200) -> str:
    """Median and p99 of `write 4 KiB + fdatasync` on a file in `directory`: the cost every
    durable commit pays at least once, whatever the database (a write-back cache shows here)."""
    path = directory / ".fsync-probe"
    block = b"x" * 4096
    timings = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(writes):
            began = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            timings.append(time.perf_counter() - began)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    timings.sort()
    p50, p99 = percentile(timings, 0.5), percentile(timings, 0.99)
    assert p50 is not None and p99 is not None
    return f"p50 {p50 * 1000:.3f} ms, p99 {p99 * 1000:.3f} ms ({writes} x write 4 KiB + fdatasync)"


def command_line() -> str:
    return " ".join(shlex.quote(part) for part in [sys.executable, *sys.argv])


def tool_version(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def machine_facts(extra: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    facts = [
        ("date (UTC)", dt.datetime.now(dt.UTC).isoformat(timespec="seconds")),
        ("command", f"`{command_line()}`"),
        ("nproc", str(os.cpu_count())),
        ("CPU", cpu_model()),
        ("kernel", platform.release()),
        ("load average at start (1/5/15 min)", load_average()),
        ("Python", platform.python_version()),
        ("SQLite (Python's sqlite3)", sqlite3.sqlite_version),
    ]
    facts.extend(extra)
    return facts


# ---------------------------------------------------------------------------- PostgreSQL


def postgres_database_url(admin_url: str, name: str) -> str:
    """SQLAlchemy URL (psycopg 3) for database `name` on the server of `admin_url`."""
    base, _, _ = admin_url.rpartition("/")
    return base.replace("postgresql://", "postgresql+psycopg://", 1) + "/" + name


def postgres_libpq_url(admin_url: str, name: str) -> str:
    base, _, _ = admin_url.rpartition("/")
    return base + "/" + name


def new_postgres_database(admin_url: str, purpose: str) -> str:
    """CREATE DATABASE bench_<purpose>_<pid>_<random>; returns its name."""
    import psycopg
    from psycopg import sql

    name = f"bench_{purpose}_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


def drop_postgres_database(admin_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    assert name.startswith("bench_"), name  # only ever drop what a benchmark created
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def postgres_backends(database_name: str) -> list[int]:
    """The pids of this machine's PostgreSQL backends connected to `database_name`: their
    title is `postgres: USER DATABASE HOST(PORT) STATE`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if title.startswith("postgres: ") and f" {database_name} " in title:
            found.append(int(entry.name))
    return found


def postgres_facts(admin_url: str) -> list[tuple[str, str]]:
    import psycopg

    names = ("synchronous_commit", "fsync", "wal_sync_method", "commit_delay", "full_page_writes", "max_connections")
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as connection:
            version = connection.execute("SHOW server_version").fetchone()
            settings = {name: connection.execute(f"SHOW {name}").fetchone() for name in names}
            data_directory = connection.execute("SHOW data_directory").fetchone()
    except psycopg.Error as error:
        return [("PostgreSQL", f"unreachable at {admin_url}: {str(error).strip()}")]
    facts = [("PostgreSQL", str(version[0] if version else "unknown"))]
    facts.append(("PostgreSQL settings", ", ".join(f"{k}={v[0] if v else '?'}" for k, v in settings.items())))
    if data_directory:
        facts.append(("PostgreSQL data directory filesystem", filesystem_of(Path(data_directory[0]))))
    return facts


# ---------------------------------------------------------------------------- numbers and tables


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines.extend("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)
    return "\n".join(lines)


def facts_table(facts: Iterable[tuple[str, str]]) -> str:
    return markdown_table(["machine / run", "value"], facts)


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    index = min(len(sorted_values), max(1, math.ceil(fraction * len(sorted_values)))) - 1
    return sorted_values[index]
