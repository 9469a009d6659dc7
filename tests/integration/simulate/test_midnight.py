"""`paycore simulate` at the end of a UTC day and across midnight, under a clock shifted by
libfaketime (Debian's `faketime` package, which .ci/run installs): the whole process and the
sandbox processor it starts over HTTP (which inherits the same offset) read the shifted time;
nothing is monkeypatched. The day is a year's last, so that midnight also changes the month and
the year.

A scenario that reconciles a settlement report once passed at noon and failed in a day's last
minutes: its payout's line was dated in the next day's report while only today's was read.
Each run here starts (`at_moment.py`) at its moment itself, whatever paycore's imports took.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from paycore.kit import clock
from paycore.simulate.driver import ALL

HELPER = Path(__file__).with_name("at_moment.py")
LIBFAKETIME = "/usr/lib/*/faketime/libfaketime.so.1"  # Debian's multiarch path
DAY, NEXT_DAY = "2026-12-31", "2027-01-01"
PAYOUT = "payout-stuck-in-doubt-reconciled"
# In-process the world is built in a few tens of milliseconds: from 23:59:59 the payout is sent
# before midnight and settled by the bank (a second and a half later) after it. Over HTTP the
# sandbox's own process takes a second or more to start, so where midnight falls in the scenario
# depends on the machine's load; the run spans it either way.
STARTS = {"inprocess": f"{DAY}T23:59:59.000000Z", "http": f"{DAY}T23:59:58.000000Z"}
FIRST_REQUEST = f"{DAY}T23:59:59.400000Z"  # where the world's first request falls from STARTS on an idle machine
RUN_TIMEOUT_S = 300
SPANNING_ATTEMPTS_MAX = 3  # runs of the spanning test, each started earlier by how late the last began


def simulate_at(moment: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`paycore simulate ARGS` in a process whose clock reads `moment` (RFC 3339) as it starts."""
    found = sorted(glob.glob(LIBFAKETIME))
    if not found:
        pytest.fail(f"these tests need libfaketime ({LIBFAKETIME}): apt-get install faketime (.ci/run installs it)")
    env = {**os.environ, "LD_PRELOAD": found[0], "FAKETIME": "+0", "FAKETIME_NO_CACHE": "1"}
    # --verbose: the log lines to standard error, where `spans_midnight` reads their times.
    command = [sys.executable, str(HELPER), moment, "simulate", "--verbose", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, env=env)


def verdict(ran: subprocess.CompletedProcess[str]) -> str:
    return f"exit {ran.returncode}\n{ran.stdout[-12_000:]}\n{ran.stderr[-3_000:]}"


def spans_midnight(ran: subprocess.CompletedProcess[str]) -> bool:
    """Whether paycore logged on both days (its JSON log lines' `ts`)."""
    return f'"ts":"{DAY}T23:59:5' in ran.stderr and f'"ts":"{NEXT_DAY}T00:00:0' in ran.stderr


def first_request_us(ran: subprocess.CompletedProcess[str]) -> int | None:
    """When the world's first request was answered (paycore's first access log line), if it was."""
    found = re.search(r'"ts":"([^"]+)","level":"info","logger":"paycore.http.access"', ran.stderr)
    return None if found is None else clock.parse_rfc3339(found.group(1))


@pytest.mark.parametrize("transport", ["inprocess", "http"])
def test_a_payout_sent_before_midnight_and_settled_after_it_is_reconciled(transport: str) -> None:
    """In-process the charge's line is in the year's last report and the payout's in the next
    year's first: the world reconciles both days' reports, and the second resolves the payout.
    On a loaded machine building the world can take the seconds left before midnight: a run that
    did not span midnight is run again, started earlier by as much as its first request came
    late (after `FIRST_REQUEST`); every run must pass, the last must span midnight."""
    moment_us = clock.parse_rfc3339(STARTS[transport])
    for _attempt in range(SPANNING_ATTEMPTS_MAX):
        ran = simulate_at(clock.to_rfc3339(moment_us), "--transport", transport, PAYOUT)
        assert ran.returncode == 0, verdict(ran)
        assert f"PASS {PAYOUT} ({transport})" in ran.stdout
        first_us = first_request_us(ran)
        if spans_midnight(ran) or first_us is None:
            break
        moment_us -= first_us - clock.parse_rfc3339(FIRST_REQUEST)
    assert spans_midnight(ran), verdict(ran)


def test_the_payout_scenario_passes_two_seconds_before_midnight() -> None:
    """What failed in a day's last quarter-hour, at 23:59:58: the bank settles the payout a second
    and a half after it was sent, and the report of the day it settled names it."""
    ran = simulate_at(f"{DAY}T23:59:58.000000Z", PAYOUT)
    assert ran.returncode == 0, verdict(ran)
    assert f"PASS {PAYOUT} (inprocess)" in ran.stdout


def test_every_scenario_passes_from_two_seconds_before_midnight_as_the_cli_runs_them() -> None:
    """`paycore simulate` with no argument, as a person types it, the clock at 23:59:58: the
    first scenarios run on the year's last day, the rest on the next year's first."""
    ran = simulate_at(f"{DAY}T23:59:58.000000Z", "--quiet")
    assert ran.returncode == 0, verdict(ran)
    assert ran.stdout.count("PASS ") == len(ALL), ran.stdout
    assert spans_midnight(ran), verdict(ran)
