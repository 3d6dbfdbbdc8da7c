"""What the roofline of every device shares: the result's fields and JSON form, the effort levels,
the steps of a run and their timing, and the rules that turn what the probes measured into ceilings.

A device's run (:func:`rooftune.machine.ceilings.measure_ceilings` on the CPU,
:func:`rooftune.machine.gpu.measure_gpu_ceilings` on a CUDA device) is a :class:`RooflineRun`
with one method per phase: the peaks, the bandwidth sweep, the second looks, the dispatch
overhead, and the assembly of the result. Each device keeps only its probes and the rules that
hold for it alone; what follows holds for both:

- interference only ever slows a kernel, so of two looks at one ceiling the faster is kept
  (:func:`keep_faster`), and a roof never falls as threads are added (:func:`never_falling`);
- a memory level's ceiling is the fastest kernel's bandwidth there (:func:`level_bandwidth`), and
  a level the sweep has no point inside is named in a warning (:func:`missing_levels`);
- a result whose measurements were noisy says so (:meth:`RooflineRun.result`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rooftune.errors import InvalidArgument
from rooftune.machine.plateaus import Plateau, detect_plateaus, name_plateaus

if TYPE_CHECKING:
    from rooftune.bench import Measurement, Policy

#: The arrays of a bandwidth sweep as a share of its largest working set: read's one array, copy's
#: second (half of it) and triad's third (a third of it).
SWEEP_ARRAYS_FACTOR = 1 + 1 / 2 + 1 / 3

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, kw_only=True)
class RooflineEffort:
    """How hard a device's probes try: the full run or --quick. The CPU's
    (:class:`rooftune.machine.probes.Effort`) and a CUDA device's
    (:class:`rooftune.machine.gpu.GpuEffort`) add what only their probes use."""

    quick: bool
    #: Working-set steps per doubling in the bandwidth sweep.
    steps_per_octave: int
    sweep_kernels: tuple[str, ...]
    peak_policy: Policy
    sweep_policy: Policy
    gemm_policy: Policy
    gemm_size: int
    #: Measure the peaks once more at the end of the run: clocks, other tenants and the host's
    #: placement of the vCPUs change over seconds, and each ceiling keeps its faster look.
    late_looks: bool = False

    @property
    def min_points(self) -> int:
        """The fewest sweep points a memory level spans: an octave of working sets; a shorter run
        is a transition between levels."""
        return max(2, self.steps_per_octave)


@dataclass(frozen=True, kw_only=True)
class Roofline:
    """What the measured roofline of a CPU (:class:`rooftune.machine.ceilings.Ceilings`) and of a
    CUDA device (:class:`rooftune.machine.gpu.GpuCeilings`) share, with the part of the JSON form
    they share; each names its platform's type and adds its own fields."""

    platform: Any
    peak_flops: dict[str, float]
    bandwidth: dict[str, float]
    bandwidth_by_kernel: dict[str, dict[str, float]]
    plateaus: dict[str, list[Plateau]]
    sweep: dict[str, list[tuple[int, float]]]
    capacity_bytes: dict[str, int]
    dispatch_overhead_s: float
    quick: bool
    measured_at: float
    duration_s: float
    skipped: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    from_store: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform.to_dict(),
            "peak_flops": {**self.peak_flops, "skipped": dict(self.skipped)},
            "bandwidth": dict(self.bandwidth),
            "bandwidth_detail": {
                "by_kernel": self.bandwidth_by_kernel,
                "plateaus": {k: [p.to_dict() for p in ps] for k, ps in self.plateaus.items()},
                "sweep": {k: [[b, r] for b, r in pts] for k, pts in self.sweep.items()},
                "capacity_bytes": self.capacity_bytes,
            },
            "dispatch_overhead_s": self.dispatch_overhead_s,
            "quick": self.quick,
            "measured_at": self.measured_at,
            "duration_s": self.duration_s,
            "estimator": "best sample",
            "details": self.details,
            "warnings": list(self.warnings),
            "from_store": self.from_store,
        }

    @staticmethod
    def shared_from_dict(d: dict[str, Any], from_store: bool) -> dict[str, Any]:
        """The constructor arguments of the fields :meth:`to_dict` wrote here (the platform aside)."""
        peak = {k: v for k, v in d["peak_flops"].items() if k not in ("per_thread", "skipped")}
        detail = d["bandwidth_detail"]
        return {
            "peak_flops": {k: float(v) for k, v in peak.items()},
            "bandwidth": {k: float(v) for k, v in d["bandwidth"].items()},
            "bandwidth_by_kernel": detail["by_kernel"],
            "plateaus": {k: [Plateau.from_dict(p) for p in ps] for k, ps in detail["plateaus"].items()},
            "sweep": {k: [(int(b), float(r)) for b, r in pts] for k, pts in detail["sweep"].items()},
            "capacity_bytes": {k: int(v) for k, v in detail["capacity_bytes"].items()},
            "dispatch_overhead_s": float(d["dispatch_overhead_s"]),
            "quick": bool(d["quick"]),
            "measured_at": float(d["measured_at"]),
            "duration_s": float(d["duration_s"]),
            "skipped": dict(d["peak_flops"].get("skipped", {})),
            "details": d.get("details", {}),
            "warnings": tuple(d.get("warnings", ())),
            "from_store": from_store,
        }


R = TypeVar("R", bound=Roofline)


def chosen_precisions(precisions: Sequence[str] | None, allowed: tuple[str, ...],
                      says: str) -> tuple[str, ...]:
    """``precisions`` in the order of ``allowed``, all of them when none is given. InvalidArgument
    for one not allowed, its message ``says`` (e.g. "allowed") and the list."""
    if not precisions:
        return allowed
    for p in precisions:
        if p not in allowed:
            raise InvalidArgument("precision", p, f"{says} {', '.join(allowed)}")
    return tuple(p for p in allowed if p in precisions)


class Steps:
    """The steps of a run, each reported to ``progress`` as it goes, and the seconds spent in each
    (a result's ``details["step_s"]``: where a run's time went). A step lasts from its start until
    the next one starts, so together the steps cover the whole run."""

    def __init__(self, progress: Progress | None, start: float) -> None:
        self.progress = progress
        self.seconds: dict[str, float] = {}
        self._current: str | None = None
        self._since = start

    def start(self, name: str | None) -> None:
        """Close the current step and start ``name`` (None: no step runs until the next start)."""
        now = time.perf_counter()
        if self._current is not None:
            self.seconds[self._current] = self.seconds.get(self._current, 0.0) + now - self._since
        self._current, self._since = name, now

    def __call__(self, name: str, done: int = 0, total: int = 1) -> None:
        """Report ``done`` of ``total`` in step ``name``, starting it unless it runs already."""
        if name != self._current:
            self.start(name)
        if self.progress:
            self.progress(name, done, total)


class RooflineRun:
    """What one run of a device's probes gathers as it goes (the peaks, the roofs it skipped and
    why, details, warnings, every Measurement taken), and the result it assembles from them."""

    def __init__(self, progress: Progress | None, quick: bool) -> None:
        self.quick = quick
        self.measured_at = time.time()
        self.t0 = time.perf_counter()
        self.step = Steps(progress, self.t0)
        self.measurements: list[Measurement] = []
        self.peak: dict[str, float] = {}
        self.skipped: dict[str, str] = {}
        self.details: dict[str, Any] = {}
        self.warnings: list[str] = []

    def close_steps(self) -> None:
        """End the last step and store the seconds of each, to the millisecond."""
        self.step.start(None)
        self.details["step_s"] = {name: round(s, 3) for name, s in self.step.seconds.items()}

    def result(self, cls: type[R], *, advice: str, **own: Any) -> R:
        """A ``cls`` of what the run gathered and ``own`` (the fields the device measures its own
        way); when some measurements were noisy, a warning that says what to do: re-run with
        --refresh ``advice``."""
        noisy = sum(1 for m in self.measurements if m.warnings)
        if noisy:
            self.warnings.append(f"{noisy} of {len(self.measurements)} measurements were noisy or unstable "
                                 "(kept in the store); if the ceilings look low, re-run with --refresh "
                                 f"{advice}")
        return cls(peak_flops=self.peak, quick=self.quick, measured_at=self.measured_at,
                   duration_s=time.perf_counter() - self.t0, skipped=self.skipped, details=self.details,
                   warnings=tuple(self.warnings), **own)


def keep_faster(rates: dict[Any, float], looks: dict[Any, float]) -> None:
    """Each rate of ``looks`` (a later look at the same ceilings) replaces its entry of ``rates``
    where it is faster, or adds it: interference only ever slows a kernel."""
    for key, rate in looks.items():
        rates[key] = max(rates.get(key, 0.0), rate)


def never_falling(name: str, per_thread: dict[int, float], warn_below: float) -> list[str]:
    """Raise each thread count's rate of roof ``name`` to the best of the smaller counts, in place:
    a run on t threads could leave some of them idle, so a roof cannot fall as threads are added.
    Returns a warning for each count that measured below ``warn_below`` times that best (a worker
    descheduled for the whole call, not the hardware)."""
    warnings: list[str] = []
    best_t, best = 0, 0.0
    for t in sorted(per_thread):
        if per_thread[t] >= best:
            best_t, best = t, per_thread[t]
            continue
        if per_thread[t] < warn_below * best:
            warnings.append(f"{name} on {t} threads measured {per_thread[t] / 1e9:.1f} G/s, below "
                            f"{best / 1e9:.1f} G/s on {best_t}; the {best_t}-thread rate is kept for {t}")
        per_thread[t] = best
    return warnings


def named_levels(xs: Sequence[int], ys: Sequence[float], capacities: dict[str, int],
                 min_points: int) -> dict[str, Plateau]:
    """The plateaus of one kernel's sweep (working sets ``xs``, bandwidths ``ys``), named after the
    memory levels of ``capacities``."""
    return name_plateaus(detect_plateaus(xs, ys, min_points=min_points), capacities, xs, ys)


def sweep_levels(named: dict[str, dict[str, Plateau]],
                 ) -> tuple[dict[str, list[Plateau]], dict[str, dict[str, float]]]:
    """From each kernel's named plateaus: (the plateaus by kernel, bandwidth by kernel and level)."""
    plateaus = {kind: list(levels_of.values()) for kind, levels_of in named.items()}
    by_kernel = {kind: {lvl: p.bandwidth for lvl, p in levels_of.items()}
                 for kind, levels_of in named.items()}
    return plateaus, by_kernel


def level_bandwidth(by_kernel: dict[str, dict[str, float]], levels: Sequence[str]) -> dict[str, float]:
    """Bandwidth of each of ``levels`` some kernel reached: the fastest kernel's there."""
    return {lvl: max(bw[lvl] for bw in by_kernel.values() if lvl in bw)
            for lvl in levels if any(lvl in bw for bw in by_kernel.values())}


def missing_levels(bandwidth: dict[str, float], levels: Sequence[str]) -> list[str]:
    """A warning for each of ``levels`` that has no bandwidth."""
    return [f"no {lvl} bandwidth: the sweep has no point inside that level"
            for lvl in levels if lvl not in bandwidth]
