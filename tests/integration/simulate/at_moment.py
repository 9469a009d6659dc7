"""Run `paycore ARGS...` with the clock reading a given moment as it starts (a test's helper).

    LD_PRELOAD='/usr/$LIB/faketime/libfaketime.so.1' FAKETIME=+0 FAKETIME_NO_CACHE=1 \
        python at_moment.py 2026-12-31T23:59:58Z simulate ...

Under libfaketime (Debian's `faketime` package) at offset +0 (the real time) paycore is imported
first; then the offset is set so that the clock reads the moment, and the command line runs in
this process as the `paycore` script runs it: what runs starts at the moment itself, however
long the imports took. libfaketime reads FAKETIME again at every call (FAKETIME_NO_CACHE), and
a process this one starts (the sandbox processor, over HTTP) inherits the same offset.
"""

from __future__ import annotations

import os
import sys
import time

import paycore.simulate.driver  # noqa: F401  (imported before the moment, with the rest)
from paycore.cli.main import main
from paycore.kit import clock

NOT_SHIFTED = 3  # exit status: the clock did not move (libfaketime not loaded)
SHIFT_TOLERANCE_US = 1_000_000


def run() -> None:
    moment_us = clock.parse_rfc3339(sys.argv[1])
    offset_us = moment_us - time.time_ns() // 1_000
    os.environ["FAKETIME"] = f"{offset_us / 1_000_000:+.6f}"
    if abs(clock.now_us() - moment_us) > SHIFT_TOLERANCE_US:
        print(f"at_moment: the clock reads {clock.to_rfc3339(clock.now_us())}, not {sys.argv[1]}", file=sys.stderr)
        sys.exit(NOT_SHIFTED)
    sys.argv = ["paycore", *sys.argv[2:]]
    main()


if __name__ == "__main__":
    run()
