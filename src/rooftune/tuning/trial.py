"""Running configurations in fresh subprocesses: one :class:`Worker` per configuration, with a
time limit on every request and crash isolation. Threads, allocator and OpenMP settings can only
be set when a process starts, which is why every configuration gets its own."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from rooftune.errors import MeasurementError
from rooftune.platform.processes import PREPARE_DEADLINE_ENV, python_command
from rooftune.platform.worker import Channel, ChildEnded, ChildTimedOut
from rooftune.runconfig import OMP_VARIABLES, RunConfig

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


class Worker:
    """A subprocess holding one prepared configuration (see :mod:`rooftune.tuning._worker`)."""

    def __init__(self, config: RunConfig, workload: dict[str, Any], reference: Path, workdir: Path,
                 prepare_timeout_s: float = PREPARE_TIMEOUT_S, calibration: Path | None = None,
                 validate: str | None = None, wait: bool = True, inputs: Path | None = None,
                 verified: bool = False, instance: int = 0) -> None:
        """Starts the process and sends it the configuration; ``wait=False`` returns at once and
        :meth:`ready` waits for the preparation (several workers then start side by side).
        ``verified``: the configuration passed its check in this study's trial, so a training step
        is not checked again (``_worker._init_train``). ``instance``: which of the configuration's
        instances it is (a pinned one is bound to that instance's cores)."""
        self.config = config
        env = {k: v for k, v in os.environ.items() if k not in CONTROLLED or not config.set_threads}
        env.update(config.environment())
        # what the worker runs to prepare (the ncnn converter) ends before the trial's own limit
        env[PREPARE_DEADLINE_ENV] = f"{time.time() + prepare_timeout_s:.3f}"
        self._spawned = time.perf_counter()
        # -P: a numpy.py in the folder the study runs from is not numpy in the trials; a
        # module:callable model is imported from that folder by name (import_user_module)
        self.channel = Channel(python_command("rooftune.tuning._worker"), env=env, exit_wait_s=EXIT_TIMEOUT_S)
        self._init = {"cmd": "init", "workload": workload, "config": config.to_dict(),
                      "reference": str(reference), "inputs": str(inputs) if inputs else None, "workdir": str(workdir),
                      "calibration": str(calibration) if calibration else None, "validate": validate,
                      "verified": verified, "instance": instance}
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

    @property
    def proc(self) -> subprocess.Popen[str]:
        return self.channel.proc

    @property
    def paused(self) -> bool:
        return self.channel.paused

    def _last_stderr(self) -> str:
        return self.channel.last_stderr()[:300]

    def call(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.send(msg)
        return self.receive(msg, timeout_s)

    def send(self, msg: dict[str, Any]) -> None:
        if not self.channel.send(msg):
            raise TrialFailed(f"the trial process died ({self._last_stderr()})")

    def receive(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        try:
            answer = self.channel.receive(timeout_s)
        except ChildTimedOut:
            raise TrialFailed(f"timed out after {timeout_s:.0f} s ({msg['cmd']})") from None
        except ChildEnded as ended:  # (killed with what it started)
            raise TrialFailed(f"{CRASHED_PREFIX}{ended.returncode}): {ended.last_stderr[:300]}") from None
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
        self.channel.pause()

    def resume(self) -> None:
        self.channel.resume()

    def close(self, kill: bool = False) -> None:
        """Ends the worker: asked to exit where it is prepared and idle, else (``kill``, still
        preparing) killed; then whatever is left of its process group is killed."""
        self.channel.close(goodbye=None if kill or not self.info else {"cmd": "exit"})

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
            for i in range(max(1, config.instances)):
                self.workers.append(Worker(config, workload, reference, workdir, prepare_timeout_s, calibration,
                                           validate, wait=False, inputs=inputs, verified=verified, instance=i))
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
