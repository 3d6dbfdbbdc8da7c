"""Primitives that take the process running them down, for the profiling worker's tests.

The worker imports this module when ``ROOFTUNE_TEST_PRIMITIVES=profiling_faults`` (with this
folder on PYTHONPATH), which registers them there. Each kernel is correct for its first
``good_calls`` calls (so it verifies, and faults while timed); each fault first appends a line
``NAME SPEC_KEY PID`` to the file named by ``ROOFTUNE_TEST_FAULT_LOG``: a test counts the faults
that happened, in whatever process.
"""

from __future__ import annotations

import ctypes
import os
import time

import torch
import torch.nn.functional as F

from rooftune.primitives import PRIMITIVES, ConvSpec, Kernel, Primitive

FAULT_LOG_ENV = "ROOFTUNE_TEST_FAULT_LOG"
#: The file whose creation marks that test-stall-once has stalled (in any process).
STALL_ENV = "ROOFTUNE_TEST_STALL_FILE"
#: Long enough that a stalled worker outlives any test unless something kills it.
STALL_S = 3600


def _log(name: str, spec: ConvSpec) -> None:
    log = os.environ.get(FAULT_LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(f"{name} {spec.key()} {os.getpid()}\n")


class _Faulty(Primitive):
    library = "test"
    #: Correct calls before the fault: 1 verifies (the check runs the kernel once), 0 faults while verifying.
    good_calls = 1

    def fault(self, spec: ConvSpec) -> None:
        raise NotImplementedError

    def prepare(self, spec: ConvSpec, weight: torch.Tensor, bias: torch.Tensor | None) -> Kernel:
        calls = [0]

        def run(x: torch.Tensor) -> torch.Tensor:
            calls[0] += 1
            if calls[0] > self.good_calls:
                self.fault(spec)
            return F.conv2d(x, weight, bias, spec.stride, spec.padding, spec.dilation, spec.groups)

        return Kernel(spec, run)


class Segfault(_Faulty):
    """Reads address 0 once timed: SIGSEGV."""

    name = "test-segfault"

    def fault(self, spec: ConvSpec) -> None:
        _log(self.name, spec)
        ctypes.string_at(0)


class SegfaultVerifying(Segfault):
    name = "test-segfault-verifying"
    good_calls = 0


class Exits(_Faulty):
    """Leaves the process with status 3 once timed (as a library calling exit() would)."""

    name = "test-exit"

    def fault(self, spec: ConvSpec) -> None:
        _log(self.name, spec)
        os._exit(3)


class Hangs(_Faulty):
    """Never returns once timed."""

    name = "test-hang"

    def fault(self, spec: ConvSpec) -> None:
        _log(self.name, spec)
        time.sleep(STALL_S)


class StallsOnce(_Faulty):
    """Stalls once timed, the first time only (the file named by ``ROOFTUNE_TEST_STALL_FILE``,
    holding the stalled process's pid, marks it); correct otherwise: a worker busy when its
    campaign is killed, and fine when the campaign is resumed."""

    name = "test-stall-once"

    def fault(self, spec: ConvSpec) -> None:
        path = os.environ.get(STALL_ENV)
        if path is None or os.path.exists(path):
            return
        with open(path + ".part", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".part", path)  # (whole when seen)
        _log(self.name, spec)
        time.sleep(STALL_S)


FAULTS: dict[str, type[Primitive]] = {
    c.name: c for c in (Segfault, SegfaultVerifying, Exits, Hangs, StallsOnce)}
PRIMITIVES.update(FAULTS)
