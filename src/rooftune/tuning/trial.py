"""Running configurations in fresh subprocesses: one :class:`Worker` per configuration, with a
time limit on every request and crash isolation. Threads, allocator and OpenMP settings can only
be set when a process starts, which is why every configuration gets its own."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from rooftune.errors import MeasurementError
from rooftune.fileio import pipe_json
from rooftune.platform.processes import (
    PREPARE_DEADLINE_ENV,
    kill_group,
    python_command,
    signal_group,
    start,
    wait_exit,
)
from rooftune.tuning.config import OMP_VARIABLES, RunConfig

#: How a trial whose process ended before answering reads, its exit status next.
CRASHED_PREFIX = "the trial process crashed (exit "

#: Time limit of preparing a configuration (export, compile, convert) and checking its output.
PREPARE_TIMEOUT_S = 240.0
#: Time limit of one measurement beyond its own budget (start-up of the timer, slow first calls).
MEASURE_SLACK_S = 60.0
#: Time a prepared worker asked to exit gets before it is killed (its interpreter's teardown).
EXIT_TIMEOUT_S = 10.0
#: Variables a configuration controls: a trial must not inherit them from the parent's environment.
CONTROLLED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD", "MALLOC_CONF", "GOMP_SPINCOUNT",
              *OMP_VARIABLES)


class TrialFailed(MeasurementError):
    """A configuration crashed, hung, or produced a wrong output."""


def _wait_stopped(pid: int, timeout_s: float = 0.5) -> None:
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


class Worker:
    """A subprocess holding one prepared configuration (see :mod:`rooftune.tuning._worker`)."""

    def __init__(self, config: RunConfig, workload: dict[str, Any], reference: Path, workdir: Path,
                 prepare_timeout_s: float = PREPARE_TIMEOUT_S, calibration: Path | None = None,
                 validate: str | None = None, wait: bool = True, inputs: Path | None = None,
                 verified: bool = False) -> None:
        """Starts the process and sends it the configuration; ``wait=False`` returns at once and
        :meth:`ready` waits for the preparation (several workers then start side by side).
        ``verified``: the configuration passed its check in this study's trial, so a training step
        is not checked again (``_worker._init_train``)."""
        self.config = config
        self.paused = False
        env = {k: v for k, v in os.environ.items() if k not in CONTROLLED or not config.set_threads}
        env.update(config.environment())
        # what the worker runs to prepare (the ncnn converter) ends before the trial's own limit
        env[PREPARE_DEADLINE_ENV] = f"{time.time() + prepare_timeout_s:.3f}"
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._spawned = time.perf_counter()
        # -P: a numpy.py in the folder the study runs from is not numpy in the trials; a
        # module:callable model is imported from that folder by name (import_user_module)
        self.proc = start(python_command("rooftune.tuning._worker"), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        self._init = {"cmd": "init", "workload": workload, "config": config.to_dict(),
                      "reference": str(reference), "inputs": str(inputs) if inputs else None, "workdir": str(workdir),
                      "calibration": str(calibration) if calibration else None, "validate": validate,
                      "verified": verified}
        self._prepare_timeout_s = prepare_timeout_s
        self.info: dict[str, Any] = {}
        try:
            self.send(self._init)
        except BaseException:
            self.close(kill=True)
            raise
        if wait:
            self.ready()

    def ready(self) -> dict[str, Any]:
        """The answer to the configuration: prepared and its output checked (once; then cached)."""
        if not self.info:
            info = self.receive(self._init, self._prepare_timeout_s)
            # what starting a process costs apart from preparing its configuration: the
            # interpreter, imports, the workload, and checking the output; and the part of its
            # preparation that every later process of it repeats (a training step's building and
            # first step: an inference's artifact is loaded, not made again)
            info["start_s"] = (max(0.0, time.perf_counter() - self._spawned - float(info.get("prepare_s", 0.0)))
                               + float(info.get("repeat_s", 0.0)))
            self.info = info
        return self.info

    def _last_stderr(self) -> str:
        self._stderr.seek(0)
        lines = [ln for ln in self._stderr.read().splitlines() if ln.strip()]
        return lines[-1][:300] if lines else ""

    def call(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.send(msg)
        return self.receive(msg, timeout_s)

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(pipe_json(msg) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise TrialFailed(f"the trial process died ({self._last_stderr()})") from None

    def receive(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            self.close(kill=True)
            raise TrialFailed(f"timed out after {timeout_s:.0f} s ({msg['cmd']})")
        line = self.proc.stdout.readline()
        if not line:
            wait_exit(self.proc, EXIT_TIMEOUT_S)
            kill_group(self.proc)  # with what it started
            raise TrialFailed(f"{CRASHED_PREFIX}{self.proc.returncode}): {self._last_stderr()}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise TrialFailed(answer.get("error", "failed"))
        return answer

    def measure(self, policy: dict[str, Any], label: str) -> dict[str, Any]:
        budget = float(policy.get("budget_s", 2.0)) + float(policy.get("warmup_s", 0.0))
        return self.call({"cmd": "measure", "policy": policy, "label": label}, budget + MEASURE_SLACK_S)["measurement"]

    def sample(self, number: int = 1, timeout_s: float = MEASURE_SLACK_S, warmup: int = 0) -> float:
        """Seconds per call of ``number`` calls, after ``warmup`` untimed calls."""
        return float(self.call({"cmd": "sample", "number": number, "warmup": warmup}, timeout_s)["seconds"])

    def pause(self) -> None:
        """Stop every thread of the worker and of what it started (SIGSTOP to its process group):
        an idle runtime's spinning threads would otherwise take cores from the configuration being
        timed beside it."""
        if not self.paused and self.proc.returncode is None:
            signal_group(self.proc, signal.SIGSTOP)
            _wait_stopped(self.proc.pid)
            self.paused = True

    def resume(self) -> None:
        if self.paused and self.proc.returncode is None:
            signal_group(self.proc, signal.SIGCONT)
        self.paused = False

    def close(self, kill: bool = False) -> None:
        """Ends the worker: asked to exit where it is prepared and idle, else (``kill``, still
        preparing) killed; then whatever is left of its process group is killed."""
        if self._stderr.closed:  # closed before (a timeout closes it at once)
            return
        self.resume()
        if self.proc.returncode is None and not kill and self.info:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(pipe_json({"cmd": "exit"}) + "\n")
                self.proc.stdin.flush()
                wait_exit(self.proc, EXIT_TIMEOUT_S)
            except BrokenPipeError:
                pass
        kill_group(self.proc)
        self._stderr.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # an error or Ctrl-C: the worker may be busy, so it is not waited for
        self.close(kill=exc_type is not None)


class Group:
    """``config.instances`` workers of one configuration running side by side (the throughput
    objective's concurrent instances). ``sample(k)``: every instance runs k calls at once; the
    answer is the round's wall time per call, so throughput = instances x batch / answer."""

    def __init__(self, config: RunConfig, workload: dict[str, Any], reference: Path, workdir: Path,
                 prepare_timeout_s: float = PREPARE_TIMEOUT_S, calibration: Path | None = None,
                 validate: str | None = None, wait: bool = True, inputs: Path | None = None,
                 verified: bool = False) -> None:
        self.config = config
        self.workers: list[Worker] = []
        try:
            # The instances start and prepare side by side (nothing is timed before all are ready).
            for _ in range(max(1, config.instances)):
                self.workers.append(Worker(config, workload, reference, workdir, prepare_timeout_s, calibration,
                                           validate, wait=False, inputs=inputs, verified=verified))
            if wait:
                self.ready()
        except BaseException:
            self.close(kill=True)
            raise

    def ready(self) -> None:
        """Waits until every instance is prepared (closing the group is the caller's, on failure too:
        an instance still preparing is killed then)."""
        for w in self.workers:
            w.ready()

    @property
    def info(self) -> dict[str, Any]:
        return self.workers[0].ready()

    @property
    def items_per_call(self) -> int:
        return len(self.workers) * self.config.batch

    def measure(self, policy: dict[str, Any], label: str) -> dict[str, Any]:
        """The harness's measurement: inside the worker for one instance, else of rounds of all
        instances at once on a :class:`VirtualClock`."""
        if len(self.workers) == 1:
            return self.workers[0].measure(policy, label)
        from rooftune.bench import Policy, measure

        clock = VirtualClock()
        return measure(clock.timed(self), label=label, policy=Policy(**policy), clock=clock).to_dict()

    def sample(self, number: int = 1, timeout_s: float = MEASURE_SLACK_S, warmup: int = 0) -> float:
        if len(self.workers) == 1:
            return self.workers[0].sample(number, timeout_s, warmup)
        if warmup:  # an untimed round of every instance at once
            for w in self.workers:
                w.send({"cmd": "sample", "number": warmup})
            for w in self.workers:
                w.receive({"cmd": "sample"}, timeout_s)
        msg = {"cmd": "sample", "number": number}
        t0 = time.perf_counter()
        for w in self.workers:
            w.send(msg)
        for w in self.workers:
            w.receive(msg, timeout_s)
        return (time.perf_counter() - t0) / number

    def pause(self) -> None:
        for w in self.workers:
            w.pause()

    def resume(self) -> None:
        for w in self.workers:
            w.resume()

    def close(self, kill: bool = False) -> None:
        for w in self.workers:
            w.close(kill)

    def __enter__(self) -> Group:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(kill=exc_type is not None)


class VirtualClock:
    """A clock that advances by the durations workers report, so the harness's compare() can
    interleave two subprocesses without counting the pipe between them. While one worker is
    timed, the others given to :meth:`timed` are paused, so only one configuration runs at once."""

    def __init__(self, warmup: int = 0) -> None:
        self.now = 0.0
        #: Untimed calls after a paused worker resumes: its first call would pay for the pause
        #: (cold caches, thread pools waking), which a program calling it back to back never sees.
        self.warmup = warmup

    def __call__(self) -> float:
        return self.now

    def timed(self, worker: Worker | Group, idle: tuple[Worker | Group, ...] = (), per: float = 1.0) -> Any:
        """A sample function for the harness; ``per`` divides the time (items per call, to
        compare per-item time, i.e. throughput)."""
        def call() -> None:
            for other in idle:
                other.pause()
            worker.resume()
            self.now += worker.sample(warmup=self.warmup if idle else 0) / per

        return call


def elapsed(t0: float) -> float:
    return time.perf_counter() - t0
