"""Machine-speed signals: a probe (a fixed small kernel timed between measurements, so that each
measurement carries how fast the machine was around it) and the hypervisor's steal time.

On shared hosts the machine runs in stretches (seconds to minutes) that slow every kernel
together, by a factor that depends on the cause (another tenant on the cores' siblings, or both
vCPUs on one physical core) and differs per kernel (BENCHMARKS.md, "quiet stretches" has
figures). Since the factor differs per kernel, a reading cannot be divided
by the probe's; but the probe tells the stretches apart: a measurement taken while the probe read
within :data:`QUIET` of its fastest is one taken on a quiet machine. (Over many rows the probe
does say how slow a campaign's host was: the performance model's data divides each profiled
time by a damped power of the probe's reading, :mod:`rooftune.perfmodel.data`.)

The probe is a 256 x 256 fp32 matrix product through torch (~0.1 ms on two cores), at the
caller's thread count, timed by the harness with a short policy (about 10 ms a reading).

On a virtual machine, Linux counts in /proc/stat the time the hypervisor kept the VM's vCPUs off
their physical CPUs while they had work ("steal"). :class:`Steal` gives its share of the CPU time
over a stretch: a direct, free account of one cause of slow stretches (not of all: a busy sibling
hyperthread on the host slows a vCPU without stealing from it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rooftune.bench.measurement import Policy
from rooftune.bench.timer import Clock, measure

#: Five samples of >= 1 ms each and no convergence test: a reading is cheap (~10 ms) and is only
#: compared with the probe's own fastest reading.
CANARY_POLICY = Policy(min_sample_time_s=0.001, warmup_s=0.002, budget_s=0.03, min_samples=5, target_rel_ci=1.0)
#: A reading within this factor of the fastest one seen is quiet: it lies between the spread of
#: quiet stretches and the slowdown of slow ones on the hosts in BENCHMARKS.md ("quiet stretches").
QUIET = 1.10
#: Between two readings while waiting for a quiet stretch.
POLL_S = 0.25
#: A stretch in which the hypervisor took more than this share of the CPU time is reported.
STEAL_WARN = 0.05
#: Fewest clock ticks (all CPUs together; 100 a second per CPU) a share is computed over: over
#: fewer, one stolen tick would read as several per cent.
STEAL_MIN_TICKS = 100


class Canary:
    """The probe; :meth:`read` returns one reading in seconds per call."""

    SIZE = 256

    def __init__(self, policy: Policy = CANARY_POLICY) -> None:
        import torch

        g = torch.Generator().manual_seed(0)
        self._a = torch.randn(self.SIZE, self.SIZE, generator=g)
        self._b = torch.randn(self.SIZE, self.SIZE, generator=g)
        self._out = torch.empty(self.SIZE, self.SIZE)
        self.policy = policy

    def _run(self) -> None:
        import torch

        torch.mm(self._a, self._b, out=self._out)

    def read(self) -> float:
        return measure(self._run, label="canary.mm256", policy=self.policy).median


def fastest_reading(readings: Iterable[float | None]) -> float | None:
    """The fastest of ``readings`` (None where there is none): what quiet is measured against."""
    values = [float(v) for v in readings if v is not None and v > 0]
    return min(values) if values else None


def is_quiet(reading: float | None, ref: float | None) -> bool:
    """Whether ``reading`` lies within QUIET of the reference ``ref`` (False without either)."""
    return reading is not None and ref is not None and reading <= QUIET * ref


def wait_quiet(read: Callable[[], float], ref: float | None, max_wait_s: float, *, clock: Clock = time.perf_counter,
               sleep: Callable[[float], None] = time.sleep) -> tuple[float, float]:
    """Read the probe until a reading is quiet against ``ref`` or about ``max_wait_s`` has passed;
    returns the last reading and the seconds waited after the first reading (0 when it was
    quiet). Without a reference, one reading."""
    reading = read()
    start = clock()
    while ref is not None and not is_quiet(reading, ref) and clock() - start + POLL_S < max_wait_s:
        sleep(POLL_S)
        reading = read()
    return reading, clock() - start


def cpu_times(path: str = "/proc/stat") -> tuple[int, int] | None:
    """(steal, total) clock ticks of all CPUs since boot, from /proc/stat's first line; None where
    there is no such file or no steal column."""
    try:
        with open(path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    try:
        ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except ValueError:
        return None
    return ticks[7], sum(ticks)


class Steal:
    """The hypervisor's share of the CPU time since construction (or :meth:`restart`)."""

    def __init__(self, read: Callable[[], tuple[int, int] | None] = cpu_times) -> None:
        self._read = read
        self._start = read()

    def restart(self) -> None:
        self._start = self._read()

    def share(self) -> float | None:
        """Stolen ticks / all ticks since the start; None where unknown or fewer than
        STEAL_MIN_TICKS ticks have passed."""
        now = self._read()
        if self._start is None or now is None or now[1] - self._start[1] < STEAL_MIN_TICKS:
            return None
        return (now[0] - self._start[0]) / (now[1] - self._start[1])


def slow_host_warning(median: float | None, quiet_share: float | None) -> str | None:
    """The warning when the probe's median reading (against its fastest) is above QUIET: the
    host slowed the machine most of the time, whether or not it took CPU time (steal) to do so."""
    if median is None or quiet_share is None or median <= QUIET:
        return None
    return (f"the machine-speed probe read {median:.2f}x its fastest on the median reading and quiet on "
            f"{quiet_share:.0%} of them: the host slowed this machine most of the time (another tenant on its "
            "cores, caches or memory, with or without steal time), so the rows repeat poorly; a quieter hour "
            "gives steadier ones")


def steal_warning(share: float | None, what: str) -> str | None:
    """The warning for ``what`` (e.g. "this measurement") when ``share`` exceeds STEAL_WARN."""
    if share is None or share <= STEAL_WARN:
        return None
    return (f"the hypervisor ran other guests on this VM's CPUs for {share:.0%} of the CPU time during {what} "
            "(steal time): its times are likely slow")
