"""Ceilings: the measured roofline of a platform, and the one function that gets them."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rooftune.errors import InvalidArgument, as_names, thread_counts
from rooftune.machine.plateaus import (
    DRAM_MIN_FACTOR,
    LEVELS,
    Plateau,
    SweepEnd,
    detect_plateaus,
    dram_confirmed,
    dram_tail,
    last_cache,
    level_warnings,
    name_plateaus,
    sweep_sizes,
)
from rooftune.platform import Platform

PRECISIONS = ("fp32", "fp64", "bf16", "int8")
#: The sweep is planned to this many times the last cache level: DRAM starts at 2x it
#: (plateaus.DRAM_MIN_FACTOR) and needs two octaves of points to be a plateau, not a point (ERT
#: sweeps up to 1 GiB). It ends earlier once DRAM is confirmed, and goes further while bandwidth
#: still falls (:class:`SweepStop`).
DRAM_FACTOR = 8
#: Without any cache information the sweep still has to leave the caches of any current CPU.
FALLBACK_MAX_BYTES = 256 * 1024**2
#: The sweep always goes this far, and ends early (once DRAM is seen) only past it.
MIN_SWEEP_BYTES = 64 * 1024**2
#: The sweep never goes past this working set, however long bandwidth keeps falling: 4x the
#: largest L3 of a current socket (1152 MiB, AMD Genoa-X) is 4.5 GiB, and past 8 GiB the first
#: touch and one pass of each point take seconds while no cache is left to leave.
MAX_SWEEP_BYTES = 8 * 1024**3
#: The sweep's arrays (1 + 1/2 + 1/3 of the largest working set) take at most this share of the
#: memory available, so a small VM on a socket with a huge L3 is not pushed into swap.
SWEEP_MEMORY_SHARE = 0.5
SWEEP_ARRAYS_FACTOR = 1 + 1 / 2 + 1 / 3


def available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes, None where the kernel does not say."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True, kw_only=True)
class Roofline:
    """What the measured roofline of a CPU (:class:`Ceilings`) and of a CUDA device
    (:class:`rooftune.machine.gpu.GpuCeilings`) share, with the part of the JSON form they share;
    each names its platform's type and adds its own fields."""

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


@dataclass(frozen=True, kw_only=True)
class Ceilings(Roofline):
    """The roofline of one platform: what the hardware can do, measured.

    ``peak_flops`` holds FLOP/s (ops/s for int8) on ``max(threads)`` threads for ``fp32``/``fp64``
    (FMA microkernels) and ``gemm_fp32``/``gemm_bf16``/``gemm_int8`` (torch GEMM);
    ``peak_flops_per_thread`` the same for every measured thread count. ``bandwidth`` holds bytes/s
    per memory level on all threads. ``skipped`` says why a roof is missing.
    """

    platform: Platform
    threads: tuple[int, ...]
    peak_flops_per_thread: dict[str, dict[int, float]]

    @property
    def max_threads(self) -> int:
        return max(self.threads)

    def describe(self) -> str:
        """What was measured, in a few words (titles of the figures)."""
        p = self.platform
        return f"{p.cpu_model} ({p.microarchitecture or 'unknown'}), {self.max_threads} threads"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``rooftune machine --json``); :meth:`from_dict` reads it back."""
        per_thread = {k: {str(t): v for t, v in d.items()} for k, d in self.peak_flops_per_thread.items()}
        d = super().to_dict()
        d["threads"] = list(self.threads)
        d["peak_flops"]["per_thread"] = per_thread
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, from_store: bool = False) -> Ceilings:
        per_thread = {k: {int(t): float(v) for t, v in pt.items()} for k, pt in d["peak_flops"]["per_thread"].items()}
        return cls(platform=Platform.from_dict(d["platform"]), threads=tuple(d["threads"]),
                   peak_flops_per_thread=per_thread, **cls.shared_from_dict(d, from_store))


def default_threads(usable: int) -> tuple[int, ...]:
    """1, 2, 4, ... and ``usable``: every count on a small machine (1, 2 on two cores; 1, 2, 3 on
    three), a geometric set on a large one, where each count costs a peak and three GEMM roofs
    (1..64 would be 64 of each; a run on another count is placed by scaling, see Roofs)."""
    counts = {usable}
    t = 1
    while t < usable:
        counts.add(t)
        t *= 2
    return tuple(sorted(counts))


def validate_threads(threads: Sequence[int] | None, usable: int) -> tuple[int, ...]:
    """Thread counts to measure, in increasing order: default :func:`default_threads`; each must
    lie in 1..usable (:func:`rooftune.errors.thread_counts`)."""
    return tuple(sorted(thread_counts(threads, usable))) or default_threads(usable)


def validate_precisions(precisions: Sequence[str] | None) -> tuple[str, ...]:
    if not precisions:
        return PRECISIONS
    for p in precisions:
        if p not in PRECISIONS:
            raise InvalidArgument("precision", p, f"allowed {', '.join(PRECISIONS)}")
    return tuple(p for p in PRECISIONS if p in precisions)


def native_support(platform: Platform, precision: str) -> str | None:
    """None when ``precision``'s GEMM roof runs on native instructions, else the reason it does not."""
    isa = set(platform.effective_isa)
    needs = {
        "bf16": ({"avx512_bf16", "amx_bf16", "bf16"}, "avx512_bf16, amx_bf16 or ARM bf16"),
        "int8": ({"avx512_vnni", "avx_vnni", "amx_int8", "i8mm"}, "avx512_vnni, avx_vnni, amx_int8 or ARM i8mm"),
    }
    if precision not in needs:
        return None
    features, names = needs[precision]
    if isa & features:
        return None
    return f"no native {precision} instructions ({names}) in the effective ISA; the roof would measure emulation"


def level_capacities(platform: Platform, cpus: tuple[int, ...]) -> dict[str, int]:
    """Bytes of each cache level available to a team on ``cpus`` ('L1' is the data cache)."""
    caps: dict[str, int] = {}
    for cache in platform.caches:
        if cache.kind == "Instruction":
            continue
        caps[f"L{cache.level}"] = cache.capacity_for(cpus)
    return caps


#: A full run measures this many of the fastest points of each cache level's plateau once more.
LATE_POINTS_PER_LEVEL = 3


@dataclass(frozen=True)
class SweepPlan:
    """The working sets of a bandwidth sweep: ``sizes`` run up to ``cap_bytes``, the largest; past
    ``planned_bytes`` the sweep goes on only while bandwidth still falls (see :class:`SweepStop`).
    ``memory_bound``: the cap comes from the share of the memory available, not from
    :data:`MAX_SWEEP_BYTES`."""

    sizes: tuple[int, ...]
    planned_bytes: int
    cap_bytes: int
    memory_bound: bool


def plan_sweep(capacities: dict[str, int], steps_per_octave: int, team_size: int,
               memory: int | None) -> SweepPlan:
    """The sweep's working sets for a team of ``team_size`` with ``capacities`` (bytes per cache
    level) and ``memory`` bytes available (None: unknown)."""
    last = last_cache(capacities)
    planned = max(DRAM_FACTOR * capacities[last], MIN_SWEEP_BYTES) if last else FALLBACK_MAX_BYTES
    cap, memory_bound = MAX_SWEEP_BYTES, False
    if memory:
        fits = max(MIN_SWEEP_BYTES, int(SWEEP_MEMORY_SHARE * memory / SWEEP_ARRAYS_FACTOR))
        if fits < cap:
            cap, memory_bound = fits, True
    # From 4 KiB per thread: smaller, every worker's share is a few vectors and the team's
    # start-up is what gets timed (16 threads on 12 KiB read 1.4 GB/s).
    sizes = [s for s in sweep_sizes(cap, steps_per_octave, min_bytes=4096 * team_size) if s <= cap]
    # a cap off the geometric grid: its last size is where the plan ends
    return SweepPlan(tuple(sizes), min(planned, sizes[-1]), sizes[-1], memory_bound)


class SweepStop:
    """The bandwidth sweep's stop rule, asked after each point of its first kernel's first pass
    (see :func:`rooftune.machine.probes.bandwidth_sweep`).

    The sweep ends at the first point where DRAM's plateau is confirmed: every cache seen, DRAM
    after them, the sweep 4x past the last cache the cores see and its last octave flat
    (:func:`rooftune.machine.plateaus.dram_confirmed`). Without DRAM seen (a cache level with no
    distinct plateau) it ends past the plan's ``planned_bytes`` once its last octave is flat. Else
    it goes on while bandwidth still falls, up to the plan's cap.

    After the sweep, ``dram_start`` is where the confirmed DRAM starts (None: not confirmed),
    ``tail_from`` where the flat tail it ended on starts (None: it ran to its cap still falling).
    """

    def __init__(self, capacities: dict[str, int], plan: SweepPlan, min_points: int) -> None:
        self.capacities = capacities
        self.plan = plan
        self.min_points = min_points
        self.dram_start: int | None = None
        self.tail_from: int | None = None

    def __call__(self, points: list[tuple[int, float]]) -> SweepEnd | None:
        start = dram_confirmed(points, self.capacities, self.min_points, MIN_SWEEP_BYTES)
        if start is None and points[-1][0] < self.plan.planned_bytes:
            return None
        sizes = [s for s, _ in points]
        tail = dram_tail(sizes, [r for _, r in points], min_points=self.min_points, from_bytes=start or 0)
        if tail is None:
            return None
        self.dram_start, self.tail_from = start, tail.start_bytes
        return SweepEnd(dram_from=start)


def kernel_dram(xs: Sequence[int], ys: Sequence[float], start: int, tail_from: int,
                min_points: int) -> Plateau:
    """One kernel's DRAM level in a sweep that ended on a flat tail: its own flat tail from
    ``start`` on (:func:`rooftune.machine.plateaus.dram_tail`), never the fastest look in the
    falling region before it.

    The first kernel's first pass ended the sweep; another kernel's curve can still fall there (a
    kernel without stores leaves a shared cache at another working set): it then gets the median
    of its points over the first kernel's tail (from ``tail_from`` on), marked not distinct.
    ``start`` and ``tail_from`` are in the points' bytes."""
    tail = dram_tail(xs, ys, min_points=min_points, from_bytes=start)
    if tail is not None:
        return tail
    run = [(x, y) for x, y in zip(xs, ys, strict=True) if x >= tail_from] or [(xs[-1], ys[-1])]
    return Plateau(run[0][0], run[-1][0], statistics.median(y for _, y in run), len(run), level="DRAM",
                   distinct=False)


def cache_peaks(points: Sequence[Any], capacities: dict[str, int], min_points: int) -> list[int]:
    """Indices of the :data:`LATE_POINTS_PER_LEVEL` fastest points inside each cache level's
    plateau of one kernel's sweep (``points``: SweepPoints): the points a level's ceiling comes
    from, which a second look may raise."""
    xs = [p.bytes for p in points]
    ys = [p.bandwidth for p in points]
    named = name_plateaus(detect_plateaus(xs, ys, min_points=min_points), capacities, xs, ys)
    chosen: set[int] = set()
    for level, plateau in named.items():
        if level == "DRAM":
            continue
        inside = [i for i, x in enumerate(xs) if plateau.start_bytes <= x <= plateau.end_bytes]
        chosen.update(sorted(inside, key=lambda i: -ys[i])[:LATE_POINTS_PER_LEVEL])
    return sorted(chosen)


def merge_best(sweep: dict[str, list[Any]], again: dict[str, list[Any]]) -> list[Any]:
    """Keep, for each point of ``again`` (a later sweep over some of ``sweep``'s working sets),
    the faster of the two looks in ``sweep``; returns the slower looks' Measurements (stored
    beside the kept ones). Interference only ever slows."""
    slower = []
    for kind, points in again.items():
        at = {p.bytes: i for i, p in enumerate(sweep[kind])}
        for point in points:
            i = at.get(point.bytes)
            if i is not None and point.bandwidth > sweep[kind][i].bandwidth:
                point, sweep[kind][i] = sweep[kind][i], point
            slower.append(point.measurement)
    return slower


def measure_ceilings(
    platform: Platform,
    *,
    threads: tuple[int, ...],
    precisions: tuple[str, ...] = PRECISIONS,
    quick: bool = False,
    progress: Any = None,
) -> tuple[Ceilings, list[Any]]:
    """Run every probe; returns the Ceilings and the Measurements behind them."""
    from rooftune.bench.canary import Steal, steal_warning
    from rooftune.machine import probes

    effort = probes.QUICK if quick else probes.FULL
    steal = Steal()
    started = time.time()
    t0 = time.perf_counter()
    cpus = platform.usable_cpus()
    top = max(threads)
    team_cpus = cpus[:top]
    measurements: list[Any] = []
    peak: dict[str, float] = {}
    per_thread: dict[str, dict[int, float]] = {}
    skipped: dict[str, str] = {}
    details: dict[str, Any] = {"vector_bytes": platform.vector_bytes, "cpus": list(team_cpus)}
    warnings: list[str] = []

    # Seconds spent in each step, stored in the details: where a run's time went.
    phases: dict[str, float] = {}
    current: list[Any] = [None, t0]

    def lap(name: str | None) -> None:  # closes the current step and starts ``name``
        now = time.perf_counter()
        if current[0] is not None:
            phases[current[0]] = phases.get(current[0], 0.0) + now - current[1]
        current[0], current[1] = name, now

    def step(name: str, done: int = 0, total: int = 1) -> None:
        if name != current[0]:
            lap(name)
        if progress:
            progress(name, done, total)

    for precision, dtype in (("fp32", "float32"), ("fp64", "float64")):
        if precision in precisions:
            step(f"FMA peak {precision}")
            r = probes.fma_peak(dtype, cpus, threads, platform.vector_bytes, effort)
            per_thread[precision] = r.flops
            peak[precision] = r.flops[top]
            details[f"fma_{precision}"] = {"chains": r.chains, "lanes": r.lanes}
            measurements += r.measurements

    capacities = level_capacities(platform, team_cpus)
    nominal = dict(capacities)
    last = last_cache(capacities)
    last_bytes = capacities[last] if last else 0
    # A level must span at least an octave of working sets; shorter runs are transitions.
    min_points = max(2, effort.steps_per_octave)
    plan = plan_sweep(capacities, effort.steps_per_octave, len(team_cpus), available_memory())
    stop = SweepStop(capacities, plan, min_points)
    step("bandwidth sweep", 0, len(plan.sizes) * len(effort.sweep_kernels) * effort.sweep_passes)
    sweep = probes.bandwidth_sweep(team_cpus, platform.vector_bytes, plan.sizes, effort, progress=step,
                                   stop=stop)
    reached = len(next(iter(sweep.values()))) if sweep else len(plan.sizes)
    sizes = list(plan.sizes[:reached])
    if sweep and stop.tail_from is None:
        why = "half the memory available" if plan.memory_bound else "its cap"
        warnings.append(f"the bandwidth sweep stopped at {sizes[-1] / 1024**2:.0f} MiB ({why}) with "
                        "bandwidth still falling: DRAM is read where the curve had not flattened, "
                        "and may read high")

    for precision in ("fp32", "bf16", "int8"):
        if precision not in precisions:
            continue
        reason = native_support(platform, precision)
        if reason:
            skipped[f"gemm_{precision}"] = reason
            continue
        step(f"GEMM roof {precision}")
        g = probes.gemm_roof(precision, threads, effort)
        per_thread[f"gemm_{precision}"] = g.ops
        peak[f"gemm_{precision}"] = g.ops[top]
        measurements += g.measurement
    details["gemm_size"] = effort.gemm_size

    # The DRAM part of the sweep and the GEMM roofs are measured once more now, seconds later:
    # another tenant's memory traffic or a shared core slows them for seconds at a time, and each
    # point keeps its best measurement (interference only ever slows).
    dram_from = stop.dram_start if stop.dram_start is not None else DRAM_MIN_FACTOR * last_bytes
    dram = [s for s in sizes if (stop.dram_start is not None or last_bytes) and s >= dram_from]

    def again(kernels: tuple[str, ...], at_sizes: list[int], name: str) -> None:
        step(name, 0, len(at_sizes) * len(kernels))
        points = probes.bandwidth_sweep(team_cpus, platform.vector_bytes, at_sizes,
                                        replace(effort, sweep_passes=1, sweep_kernels=kernels),
                                        progress=lambda _name, done, total: step(name, done, total))
        measurements.extend(merge_best(sweep, points))

    if dram and effort.late_dram_pass:
        again(effort.sweep_kernels, dram, "DRAM bandwidth again")
    for precision in ("fp32", "bf16", "int8"):
        name = f"gemm_{precision}"
        if name in per_thread and effort.late_gemm:
            step(f"GEMM roof {precision} again")
            g = probes.gemm_roof(precision, threads, effort)
            measurements += g.measurement
            per_thread[name] = {t: max(rate, g.ops[t]) for t, rate in per_thread[name].items()}
    if effort.late_looks:
        for kind, points in sweep.items():
            at_sizes = [sizes[i] for i in cache_peaks(points, capacities, min_points)]
            if at_sizes:
                again((kind,), at_sizes, "cache bandwidth again")

    bandwidth_by_kernel: dict[str, dict[str, float]] = {}
    plateaus: dict[str, list[Plateau]] = {}
    for kind, points in sweep.items():
        measurements += [p.measurement for p in points]
        xs = [p.bytes for p in points]
        ys = [p.bandwidth for p in points]
        found = detect_plateaus(xs, ys, min_points=min_points)
        named = name_plateaus(found, capacities, xs, ys)
        if stop.tail_from is not None:
            # The sweep ended on a flat tail: DRAM is that plateau. The stop rule saw target
            # sizes; the points hold the bytes measured (whole blocks).
            start = stop.dram_start if stop.dram_start is not None else int(DRAM_MIN_FACTOR * last_bytes)
            at = {size: x for size, x in zip(sizes, xs, strict=True)}
            named["DRAM"] = kernel_dram(xs, ys, at.get(start, start), at[stop.tail_from], min_points)
            named = {lvl: named[lvl] for lvl in LEVELS if lvl in named}
            if not named["DRAM"].distinct:
                warnings.append(f"{kind}: bandwidth still fell at the end of the sweep; DRAM is the median "
                                f"of its {named['DRAM'].points} points over the plateau the sweep ended on")
        plateaus[kind] = list(named.values())
        bandwidth_by_kernel[kind] = {lvl: p.bandwidth for lvl, p in named.items()}
        warnings += level_warnings(kind, {lvl: p for lvl, p in named.items() if lvl != "DRAM" or p.distinct})
    # Where DRAM began below twice the nominal last cache, that cache holds only about as much as
    # its plateau reached (the largest reach over the kernels): the analysis places working sets
    # by this capacity.
    reach = [p.end_bytes for ps in plateaus.values() for p in ps if p.level == last and p.distinct]
    early = [p for ps in plateaus.values() for p in ps
             if p.level == "DRAM" and p.distinct and p.start_bytes < DRAM_MIN_FACTOR * last_bytes]
    if last and early and reach and max(reach) < last_bytes:
        capacities[last] = max(reach)
        details["nominal_capacity_bytes"] = nominal
        warnings.append(
            f"{last}: {last_bytes / 1024**2:.0f} MiB in sysfs, but bandwidth falls to DRAM's past "
            f"{max(reach) / 1024**2:.0f} MiB here (a cache shared with other cores or tenants); "
            f"{max(reach) / 1024**2:.0f} MiB is used as its capacity")
    bandwidth = {
        lvl: max(bw[lvl] for bw in bandwidth_by_kernel.values() if lvl in bw)
        for lvl in LEVELS
        if any(lvl in bw for bw in bandwidth_by_kernel.values())
    }
    for lvl in LEVELS:
        if lvl not in bandwidth:
            warnings.append(f"no {lvl} bandwidth: the sweep has no point inside that level")

    # The peaks are measured once more now, seconds later (every count in a full run; a multi-thread
    # peak that scaled poorly even after its retries in any run): the host's placement of the vCPUs
    # changes over seconds, not milliseconds.
    for precision, dtype in (("fp32", "float32"), ("fp64", "float64")):
        per = per_thread.get(precision, {})
        chains = details.get(f"fma_{precision}", {}).get("chains")
        late = [t for t, rate in per.items() if probes.scaled_poorly(rate, t, per.get(1, 0.0))]
        if per and effort.late_looks:
            step(f"FMA peak {precision} again")
            r = probes.fma_peak(dtype, cpus, sorted(per), platform.vector_bytes, effort, chains=chains)
        elif late:
            step(f"FMA peak {precision} again (it scaled poorly)")
            r = probes.fma_peak(dtype, cpus, late, platform.vector_bytes, effort, chains=chains, one_thread=per[1])
        else:
            continue
        measurements += r.measurements
        for t, rate in r.flops.items():
            per[t] = max(per[t], rate)
    # Only the FMA peaks must scale linearly on distinct cores; a GEMM's scaling is limited by its
    # size and by memory (a 768^3 bf16 GEMM reached 5.3x on 16 cores), so it is no sign of sharing.
    for name in ("fp32", "fp64"):
        per = per_thread.get(name, {})
        one = per.get(1, 0.0)
        for t, rate in per.items():
            if probes.scaled_poorly(rate, t, one):
                warnings.append(
                    f"{name} on {t} threads reached only {rate / one:.2f}x its 1-thread rate after "
                    f"{probes.SCALING_RETRIES + 1} tries: the CPUs shared a physical core (SMT siblings, "
                    "or a host running the vCPUs on one core); re-run with --refresh to measure again"
                )
    # A roof cannot fall as threads are added (a run on t threads could leave some idle): a count
    # that measured below a smaller count keeps the smaller count's rate, and says so when it was
    # far below (16 threads read 30 GFLOP/s after 788 on 15: a descheduled worker, not the CPU).
    # The peaks on max(threads) are set here, after every second look.
    for name, per in per_thread.items():
        best_t, best = 0, 0.0
        for t in sorted(per):
            if per[t] >= best:
                best_t, best = t, per[t]
                continue
            if per[t] < probes.SCALING_FLOOR * best:
                warnings.append(f"{name} on {t} threads measured {per[t] / 1e9:.1f} G/s, below "
                                f"{best / 1e9:.1f} G/s on {best_t}; the {best_t}-thread rate is kept for {t}")
            per[t] = best
        if name in peak:
            peak[name] = per[top]
    step("dispatch overhead")
    overhead, m = probes.dispatch_overhead(effort)
    measurements.append(m)
    lap(None)
    details["step_s"] = {name: round(s, 3) for name, s in phases.items()}
    details["steal_share"] = steal.share()
    stolen = steal_warning(details["steal_share"], "the run")
    if stolen:
        warnings.append(stolen + "; re-run with --refresh on a quieter machine")
    noisy = sum(1 for m in measurements if m.warnings)
    if noisy:
        warnings.append(
            f"{noisy} of {len(measurements)} measurements were noisy or unstable (kept in the store); "
            "if the ceilings look low, re-run with --refresh on a quieter machine"
        )
    ceilings = Ceilings(
        platform=platform,
        threads=threads,
        peak_flops=peak,
        peak_flops_per_thread=per_thread,
        bandwidth=bandwidth,
        bandwidth_by_kernel=bandwidth_by_kernel,
        plateaus=plateaus,
        sweep={k: [(p.bytes, p.bandwidth) for p in pts] for k, pts in sweep.items()},
        capacity_bytes=capacities,
        dispatch_overhead_s=overhead,
        quick=quick,
        measured_at=started,
        duration_s=time.perf_counter() - t0,
        skipped=skipped,
        details=details,
        warnings=tuple(warnings),
    )
    return ceilings, measurements


#: A ceiling this far below the best earlier run of the same effort on the same platform draws a
#: warning: the hardware and software are the same (the platform id says so), so most likely the host
#: was busier.
BELOW_BEST = 0.10


def below_earlier_runs(ceilings: Any, history: Sequence[dict[str, Any]]) -> tuple[dict[str, float], str | None]:
    """Each ceiling of ``ceilings`` (a Ceilings or a GpuCeilings: FMA and GEMM peaks, bandwidth per
    level) that lies more than
    :data:`BELOW_BEST` below the best of the earlier runs in ``history`` (their JSON form), as
    this run / that best; and a warning naming them, or None.

    Steal time catches a hypervisor that takes the CPU away; another tenant on the SMT siblings, the
    shared L3 or the memory bus slows the kernels without it (a 2-vCPU VM read L1 at 547 GB/s in one
    run and 993 in the next with no steal), and only an earlier run on the same platform shows it."""
    best: dict[str, float] = {}
    for run in history:
        values = {**{k: v for k, v in run.get("peak_flops", {}).items() if isinstance(v, (int, float))},
                  **run.get("bandwidth", {})}
        for name, value in values.items():
            best[name] = max(best.get(name, 0.0), float(value))
    now = {**ceilings.peak_flops, **ceilings.bandwidth}
    below = {name: now[name] / best[name] for name in now if name in best and now[name] < (1 - BELOW_BEST) * best[name]}
    if not below:
        return {}, None
    parts = ", ".join(f"{name} {ratio - 1:+.0%}" for name, ratio in below.items())
    return below, (f"below the best of {len(history)} earlier run(s) on this platform by more than "
                   f"{BELOW_BEST:.0%}: {parts} (same hardware and software, so most likely a busier host: another "
                   "tenant on the same cores, caches or memory); re-run with --refresh when it is quieter")


def stored_or_measured(store: Any, platform: Any, *, threads: Sequence[int], quick: bool, refresh: bool,
                       load: Callable[[dict[str, Any]], Any], complete: Callable[[Any], bool],
                       measure: Callable[[], tuple[Any, list[Any]]]) -> Any:
    """The newest stored ceilings of ``platform`` (a Platform or a GpuDevice) on ``threads`` that
    ``complete`` accepts (unless ``refresh``); else ``measure()``d now, compared with the earlier
    runs of the same effort (:func:`below_earlier_runs`) and stored with their Measurements in one
    transaction."""
    if not refresh:
        data = store.load_ceilings(platform.id, threads=threads, allow_quick=quick)
        if data is not None:
            cached = load(data)
            if complete(cached):
                return cached
    ceilings, measurements = measure()
    history = store.ceilings_history(platform.id, threads=threads, quick=quick)
    below, warning = below_earlier_runs(ceilings, history)
    if warning:
        ceilings = replace(ceilings, warnings=(*ceilings.warnings, warning),
                           details={**ceilings.details, "below_earlier_runs": below})
    import rooftune

    store.save_ceilings(platform, ceilings.to_dict(), quick=quick, threads=threads,
                        measurements=[m.to_dict() for m in measurements], rooftune_version=rooftune.__version__)
    return ceilings


def get_ceilings(
    *,
    threads: Sequence[int] | None = None,
    precisions: Sequence[str] | None = None,
    quick: bool = False,
    refresh: bool = False,
    db: str | None = None,
    store: Any = None,
    platform: Platform | None = None,
    progress: Any = None,
) -> Ceilings:
    """This platform's ceilings: from the store when measured before (unless ``refresh``), else
    measured now and stored. A quick result satisfies only a quick request.

    Raises InvalidArgument for a bad thread count or precision and StoreError for a bad store,
    before anything is measured or written.
    """
    from rooftune.platform import current_platform
    from rooftune.store import Store

    platform = platform or current_platform()
    th = validate_threads(threads, platform.usable_cores)
    prec = validate_precisions(as_names(precisions, "precisions"))
    own_store = store is None
    store = store if store is not None else Store(db)
    wanted = {"fp32": "fp32", "fp64": "fp64", "bf16": "gemm_bf16", "int8": "gemm_int8"}

    def complete(cached: Ceilings) -> bool:
        have = set(cached.peak_flops) | set(cached.skipped) | set(cached.peak_flops_per_thread)
        return all(wanted[p] in have for p in prec)

    try:
        return stored_or_measured(
            store, platform, threads=th, quick=quick, refresh=refresh,
            load=lambda data: Ceilings.from_dict(data, from_store=True), complete=complete,
            measure=lambda: measure_ceilings(platform, threads=th, precisions=prec, quick=quick, progress=progress))
    finally:
        if own_store:
            store.close()
