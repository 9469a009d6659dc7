"""`paycore serve --workers N` (ADR 0028): this process has bound the listening socket and
checked everything a start checks; here it starts N API processes on that socket and keeps
them running. It serves no request and opens no database connection of its own.

- Each child is a new interpreter (`python -m paycore.cli.api_process`), not a fork: it
  inherits the socket and the read end of a pipe (`pass_fds`) and nothing else, so no
  connection, pool, writer thread or lock of this process is ever shared.
- A child that exits while nobody asked it to is started again, at most `SERVE_RESTARTS_MAX`
  times within `SERVE_RESTART_WINDOW_MS`; one more and this process stops every child and
  exits 1 (`serve_gave_up`): a crash loop is an operator's problem, not one to hide.
- SIGTERM or SIGINT: every child is sent SIGTERM, finishes its requests in flight (each has
  `SERVE_STOP_TIMEOUT_MS`, then SIGKILL) and this process exits 0.
- The children are in their own process group (a terminal's Ctrl-C reaches this process only,
  which decides), and each watches the pipe: when this process is gone, however it died, the
  pipe's end is closed by the kernel and the child stops as on SIGTERM.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from types import FrameType

from paycore.config import SERVE_RESTART_WINDOW_MS, SERVE_RESTARTS_MAX, SERVE_STOP_TIMEOUT_MS, SERVE_WORKERS_MAX

log = logging.getLogger(__name__)
POLL_S = 0.1  # how often the children are looked at; a restart waits at most this long


@dataclass
class Supervisor:
    listening: socket.socket
    count: int
    host: str
    port: int
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _restarts_s: deque[float] = field(default_factory=deque)
    _watch_fd: int = -1

    def run(self, stop: threading.Event, received: list[int]) -> int:
        """Start the children, keep them up until `stop` is set (0) or the give-up rule says
        otherwise (1), then stop them all."""
        assert 1 < self.count <= SERVE_WORKERS_MAX, self.count
        self._watch_fd, held_fd = os.pipe()  # this process never writes: its end closing is the news
        try:
            self._children = [self._start(index) for index in range(self.count)]
            status = self._watch(stop)
            if received:
                name = signal.Signals(received[0]).name
                log.info("%s: stopping the API processes", name, extra={"event": "serve_stopping", "signal": name})
            return max(status, self._stop_all())
        finally:
            os.close(self._watch_fd)
            os.close(held_fd)

    def _start(self, index: int) -> subprocess.Popen[bytes]:
        fd = self.listening.fileno()
        command = [sys.executable, "-m", "paycore.cli.api_process"]
        command += [f"--listen-fd={fd}", f"--watch-fd={self._watch_fd}", f"--index={index}"]
        command += [f"--host={self.host}", f"--port={self.port}"]
        child = subprocess.Popen(command, pass_fds=(fd, self._watch_fd), process_group=0)
        log.info(
            "API process %d started (pid %d)",
            index,
            child.pid,
            extra={"event": "api_process_spawned", "index": index, "pid": child.pid},
        )
        return child

    def _watch(self, stop: threading.Event) -> int:
        while not stop.wait(POLL_S):
            for index, child in enumerate(self._children):
                status = child.poll()
                if status is None:
                    continue
                if not self._may_restart():
                    log.error(
                        "API process %d (pid %d) exited with status %d: more than %d restarts within %d ms, "
                        "so paycore serve stops every API process and exits 1",
                        index,
                        child.pid,
                        status,
                        SERVE_RESTARTS_MAX,
                        SERVE_RESTART_WINDOW_MS,
                        extra={"event": "serve_gave_up", "index": index, "pid": child.pid, "status": status},
                    )
                    return 1
                log.warning(
                    "API process %d (pid %d) exited with status %d; starting it again",
                    index,
                    child.pid,
                    status,
                    extra={"event": "api_process_restarted", "index": index, "pid": child.pid, "status": status},
                )
                self._children[index] = self._start(index)
        return 0

    def _may_restart(self) -> bool:
        """The give-up rule: True, and the restart counted, while fewer than
        SERVE_RESTARTS_MAX restarts happened within the last SERVE_RESTART_WINDOW_MS."""
        now_s = time.monotonic()
        while self._restarts_s and now_s - self._restarts_s[0] > SERVE_RESTART_WINDOW_MS / 1000:
            self._restarts_s.popleft()
        if len(self._restarts_s) >= SERVE_RESTARTS_MAX:
            return False
        self._restarts_s.append(now_s)
        return True

    def _stop_all(self) -> int:
        """SIGTERM to every child still running, then wait for each within the bound; a child
        still running after it is killed (SIGKILL), and the exit status is 1."""
        for child in self._children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline_s = time.monotonic() + SERVE_STOP_TIMEOUT_MS / 1000
        status = 0
        for index, child in enumerate(self._children):
            try:
                child.wait(max(0.0, deadline_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error(
                    "API process %d (pid %d) did not stop within %d ms; killed",
                    index,
                    child.pid,
                    SERVE_STOP_TIMEOUT_MS,
                    extra={"event": "api_process_killed", "index": index, "pid": child.pid},
                )
                child.kill()
                child.wait()
                status = 1
        return status


def supervise(listening: socket.socket, count: int, host: str, port: int) -> int:
    """Run `count` API processes on `listening` until SIGTERM or SIGINT; the exit status."""
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del frame  # no logging here: the main thread may hold the logging lock
        received.append(signum)
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return Supervisor(listening, count, host, port).run(stop, received)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
