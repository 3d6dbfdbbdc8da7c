"""Running a campaign's primitives in a worker subprocess (:mod:`rooftune.profiling._worker`).

One worker is kept warm across specs, thread counts and passes, so its start-up (the
interpreter, torch, the primitives' libraries) is paid once. Every answer has a time limit. A
worker that dies (a signal, an exit) or does not answer in time is killed with its whole process
group, the item it was on comes back failed with the reason (``crashed (signal 11, SIGSEGV)``,
``timed out after 60 s``) and ``crashed`` set, and the next item starts a fresh worker, which is
sent the current spec again. The worker leads a process group of its own (Ctrl-C in a terminal
reaches the campaign alone, which then ends the worker) and is sent SIGKILL by the kernel when
the campaign's process dies, however it dies (``PR_SET_PDEATHSIG``): a killed campaign leaves no
worker behind.
"""

from __future__ import annotations

import signal
from dataclasses import asdict
from typing import Any

from rooftune.bench import Measurement, Policy
from rooftune.bench.canary import CANARY_POLICY
from rooftune.errors import MeasurementError
from rooftune.platform import processes
from rooftune.platform.worker import Channel, ChildEnded, ChildTimedOut
from rooftune.primitives import ConvSpec
from rooftune.profiling.work import REASON_CHARS, Outcome

WORKER_MODULE = "rooftune.profiling._worker"
#: Longest wait for a fresh worker's first answer: the interpreter, torch and the primitives'
#: libraries import in seconds on a loaded small machine; the margin covers a slow disk's first import.
WORKER_START_S = 120.0
#: Longest a primitive's preparation may take: weight packing, an ONNX Runtime session, int8
#: calibration, and the fp64 reference the spec's first supported primitive computes (tens of
#: seconds for a large layer at a large batch on one core).
PREPARE_LIMIT_S = 300.0
#: How long after its policy's warm-up and budget a measurement's answer may come: calibration
#: (outside the budget) and a slow kernel's last sample (one call of a large layer lasts about a
#: second at one thread), on a loaded host. A kernel that hangs is caught within about a minute.
MEASURE_SLACK_S = 60.0
#: Seconds a worker has to leave after "exit", or to be reaped after it closed its pipe, before
#: it is killed.
EXIT_WAIT_S = 5.0
#: A probe reading is taken again once in a fresh worker when the worker is lost during it (a
#: kernel that corrupted the worker's memory may crash it later); a second loss ends the campaign.
PROBE_TRIES = 2


def measure_limit(policy: Policy) -> float:
    """The longest a measurement under ``policy`` may take to answer (inf: no limit)."""
    return policy.warmup_s + policy.budget_s + MEASURE_SLACK_S


def _seconds(limit: float) -> str:
    return f"{limit:.0f}" if limit >= 10 else f"{limit:.1f}"


class _Lost(Exception):
    """The worker died or hung; it has been killed and reaped. ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _WorkerProbe:
    """The machine-speed probe read in the worker, where the kernels run (and at their threads)."""

    def __init__(self, runner: Isolated) -> None:
        self._runner = runner

    def read(self) -> float:
        return self._runner.read_probe()


class Isolated:
    """A :class:`~rooftune.profiling.work.Runner` whose kernels run in a warm worker subprocess.

    ``time_limit_s`` replaces every limit on an answer (:data:`PREPARE_LIMIT_S` for a
    preparation, :func:`measure_limit` of the policy for a measurement or a probe reading);
    ``started`` counts the workers started."""

    def __init__(self, time_limit_s: float | None = None) -> None:
        self.time_limit_s = time_limit_s
        self.started = 0
        self.probe = _WorkerProbe(self)
        self._channel: Channel | None = None
        self._threads: int | None = None
        self._spec: dict[str, Any] | None = None
        self._spec_sent = False
        self._busy = False  # a request is unanswered (an interrupted wait): close() kills at once

    # ------------------------------------------------------------------ the Runner protocol

    def set_threads(self, threads: int) -> None:
        self._threads = threads

    def begin(self, spec: ConvSpec, threads: int) -> None:
        self._spec = {"cmd": "spec", "spec": spec.to_dict(), "threads": threads}
        self._spec_sent = False

    def prepare(self, name: str) -> Outcome:
        return self._item({"cmd": "prepare", "name": name}, self._limit(PREPARE_LIMIT_S))

    def measure(self, name: str, policy: Policy) -> Outcome:
        msg = {"cmd": "measure", "name": name, "policy": asdict(policy)}
        return self._item(msg, self._limit(measure_limit(policy)))

    def read_probe(self) -> float:
        """One reading of the machine-speed probe in the worker, at the threads last set."""
        msg = {"cmd": "probe", "threads": self._threads}
        lost = ""
        for _ in range(PROBE_TRIES):
            try:
                answer = self._call(msg, self._limit(measure_limit(CANARY_POLICY)))
            except _Lost as exc:
                lost = exc.reason
                continue
            if not answer.get("ok"):
                raise MeasurementError("the machine-speed probe failed in the profiling worker: "
                                       f"{answer.get('error')}")
            return float(answer["seconds"])
        raise MeasurementError(f"the profiling worker was lost {PROBE_TRIES} times reading the machine-speed "
                               f"probe (last: {lost})")

    def close(self) -> None:
        """Ends the worker (asked to exit, killed with its group if it does not, or at once when
        it is busy: an interrupted campaign)."""
        self._end(goodbye=None if self._busy else {"cmd": "exit"})

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the worker

    def _limit(self, default: float) -> float:
        return self.time_limit_s if self.time_limit_s is not None else default

    def _item(self, msg: dict[str, Any], limit: float) -> Outcome:
        """``msg`` answered for the current spec; a lost worker makes the item failed and crashed."""
        assert self._spec is not None, "begin() a spec first"
        if self._channel is None:
            self._start()  # (before the spec is sent: a fresh worker has none)
        try:
            if not self._spec_sent:
                answer = self._call(self._spec, limit)
                if not answer.get("ok"):
                    return Outcome("failed", str(answer.get("error", "failed"))[:REASON_CHARS])
                self._spec_sent = True
            answer = self._call(msg, limit)
        except _Lost as lost:
            return Outcome("failed", lost.reason[:REASON_CHARS], crashed=True)
        if not answer.get("ok"):
            return Outcome("failed", str(answer.get("error", "failed"))[:REASON_CHARS])
        m = answer.get("measurement")
        return Outcome(str(answer["status"]), str(answer.get("reason") or ""),
                       Measurement.from_dict(m) if m is not None else None)

    def _call(self, msg: dict[str, Any], limit: float) -> dict[str, Any]:
        """One request and its answer, starting a worker first where there is none."""
        channel = self._channel if self._channel is not None else self._start()
        self._busy = True
        channel.send(msg)  # (where it died since its last answer, the answer that does not come says how)
        answer = self._read(limit)
        self._busy = False
        return answer

    def _read(self, limit: float) -> dict[str, Any]:
        channel = self._channel
        assert channel is not None
        try:
            return channel.receive(limit)
        except ChildTimedOut:
            self._forget()
            raise _Lost(f"timed out after {_seconds(limit)} s") from None
        except ChildEnded as ended:
            self._forget()
            raise _Lost(_crashed(ended)) from None

    def _start(self) -> Channel:
        # -P: the folder the campaign runs from is not on the worker's sys.path (a numpy.py there
        # must not take numpy's place); stderr kept for the reason of a crash
        self._channel = Channel(processes.python_command(WORKER_MODULE), exit_wait_s=EXIT_WAIT_S)
        self.started += 1
        self._busy = True  # (until it says it is ready)
        try:
            answer = self._read(WORKER_START_S)
        except _Lost as lost:
            raise MeasurementError(f"the profiling worker did not start: {lost.reason}") from None
        self._busy = False
        if not answer.get("ready"):
            self._end()
            raise MeasurementError(f"the profiling worker did not start: it answered {answer}")
        return self._channel

    def _forget(self) -> None:
        """Drop the worker that is gone (its channel closed it)."""
        self._channel = None
        self._spec_sent = self._busy = False

    def _end(self, goodbye: dict[str, Any] | None = None) -> None:
        """End the worker (sent ``goodbye`` first where given), kill its process group (whatever it
        started too) and reap it."""
        channel = self._channel
        self._forget()
        if channel is not None:
            channel.close(goodbye)


def _crashed(ended: ChildEnded) -> str:
    """Why the worker closed its pipe."""
    code = ended.returncode
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown"
        return f"crashed (signal {-code}, {name})"
    return f"crashed (exit status {code})" + (f": {ended.last_stderr}" if ended.last_stderr else "")
