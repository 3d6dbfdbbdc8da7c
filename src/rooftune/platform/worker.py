"""A child process spoken to in JSON lines: rooftune's one channel to a worker.

A trial's worker (:mod:`rooftune.tuning.trial`), the profiling worker
(:mod:`rooftune.profiling.isolated`) and an isolated measurement (:mod:`rooftune.bench.isolation`)
each run a Python child that reads one JSON object per line on its stdin and answers one per line
on its stdout (:func:`~rooftune.platform.processes.protocol_pipe` and
:func:`~rooftune.platform.processes.answer` on the child's side). :class:`Channel` is the parent's
side: the child is started by :func:`~rooftune.platform.processes.start` (a process group of its
own, registered with the watchdog), every answer is waited for within a time limit, a child that
does not answer in time or that ends is killed with its whole group, and its stderr is kept so
that the last line it wrote can say why it ended. What the messages say is each caller's.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from rooftune.fileio import pipe_json
from rooftune.platform.processes import kill_group, signal_group, start, wait_exit


class ChildTimedOut(Exception):
    """The child did not answer within ``timeout_s``; it has been killed with its group."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"timed out after {timeout_s} s")
        self.timeout_s = timeout_s


class ChildEnded(Exception):
    """The child closed its stdout (it exited or crashed); it has been reaped and its group killed.
    ``returncode``: its exit status (-N for signal N); ``last_stderr``: the last line it wrote there."""

    def __init__(self, returncode: int, last_stderr: str) -> None:
        super().__init__(f"ended with status {returncode}: {last_stderr}")
        self.returncode = returncode
        self.last_stderr = last_stderr


def wait_stopped(pid: int, timeout_s: float = 0.5) -> None:
    """Wait until every thread of the process ``pid`` is stopped (SIGSTOP is delivered
    asynchronously, thread by thread: on a busy host a worker can still run right after it is
    sent), reading /proc/PID/task/*/stat; returns at once where there is no /proc, and after
    ``timeout_s`` at most."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return
        running = False
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue  # (a thread that just ended)
            running = running or state not in ("T", "t", "Z", "X")
        if not running:
            return
        time.sleep(0.0002)


class Channel:
    """The child ``cmd`` (with ``env``, else this process's environment), one JSON object a line
    each way. ``exit_wait_s``: how long a child that closed its stdout, or was asked to leave, has
    to exit before its group is killed (not reaped before: its pid names the group until then)."""

    def __init__(self, cmd: Sequence[str], *, exit_wait_s: float, env: dict[str, str] | None = None) -> None:
        self.exit_wait_s = exit_wait_s
        self.paused = False
        # stderr goes to a file, not a pipe: a child that writes much there never blocks on it,
        # and its last line says why it ended
        self._stderr = tempfile.TemporaryFile(mode="w+")
        try:
            self.proc = start(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                              text=True, env=env)
        except BaseException:
            self._stderr.close()
            raise

    @property
    def closed(self) -> bool:
        return self._stderr.closed

    @property
    def running(self) -> bool:
        """Whether the child has not been reaped yet."""
        return self.proc.returncode is None

    def send(self, msg: dict[str, Any]) -> bool:
        """Write ``msg`` as one line; False where the child's stdin is closed (it died since its
        last answer: :meth:`receive` then says how it ended)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(pipe_json(msg) + "\n")
            self.proc.stdin.flush()
        except OSError:  # (BrokenPipeError)
            return False
        return True

    def receive(self, timeout_s: float) -> dict[str, Any]:
        """The child's next answer, waited for ``timeout_s`` at most (inf: no limit); raises
        :class:`ChildTimedOut` or :class:`ChildEnded`, the child then gone with its group."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], None if math.isinf(timeout_s) else timeout_s)
        if not ready:
            self.close()
            raise ChildTimedOut(timeout_s)
        line = self.proc.stdout.readline()
        if not line:
            wait_exit(self.proc, self.exit_wait_s)  # not reaped: the group is killed while the pid names it
            last = self.last_stderr()
            self.close()
            raise ChildEnded(self.proc.returncode, last)
        return dict(json.loads(line))

    def last_stderr(self) -> str:
        """The last line that is not blank the child wrote to its stderr ("" for none)."""
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        lines = [ln.strip() for ln in self._stderr.read().splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    def pause(self) -> None:
        """Stop every thread of the child and of what it started (SIGSTOP to its process group)."""
        if not self.paused and self.running:
            signal_group(self.proc, signal.SIGSTOP)
            wait_stopped(self.proc.pid)
            self.paused = True

    def resume(self) -> None:
        if self.paused and self.running:
            signal_group(self.proc, signal.SIGCONT)
        self.paused = False

    def close(self, goodbye: dict[str, Any] | None = None) -> None:
        """End the child: sent ``goodbye`` where given (it is idle and may leave on its own) and
        waited for ``exit_wait_s``; then whatever is left of its group is killed, it is reaped and
        the pipes are closed. Closing a closed channel does nothing."""
        if self.closed:
            return
        self.resume()
        if goodbye is not None and self.running and self.send(goodbye):
            wait_exit(self.proc, self.exit_wait_s)
        kill_group(self.proc)
        for f in (self.proc.stdin, self.proc.stdout, self._stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
