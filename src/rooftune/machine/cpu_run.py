"""One run of the CPU's probes (:func:`rooftune.machine.ceilings.measure_ceilings`), phase by phase.

:meth:`CpuRun.run` measures in this order, each phase a method:

1. :meth:`~CpuRun.peaks`: the FMA peaks on every thread count;
2. :meth:`~CpuRun.sweep`: the bandwidth sweep, planned from the caches and the memory available,
   ended by :class:`rooftune.machine.sweep_plan.SweepStop`;
3. :meth:`~CpuRun.gemm_roofs`: the GEMM roofs the ISA runs natively;
4. :meth:`~CpuRun.second_looks`: in a full run the DRAM points, the GEMM roofs and the fastest
   points of every cache level once more, seconds later; each keeps its faster look;
5. :meth:`~CpuRun.levels`: each kernel's plateaus named after the memory levels;
6. :meth:`~CpuRun.peaks_again`: the FMA peaks once more (every count in a full run, a count that
   scaled poorly in any run);
7. :meth:`~CpuRun.dispatch`: the framework's dispatch overhead;
8. :meth:`~CpuRun.assemble`: scaling warnings, roofs that never fall, steal time, the result.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import rooftune.machine.probes as probes
from rooftune.bench.canary import Steal, steal_warning
from rooftune.machine.cpu_ceilings import Ceilings, level_capacities, native_support
from rooftune.machine.plateaus import DRAM_MIN_FACTOR, LEVELS, Plateau, last_cache, level_warnings
from rooftune.machine.roofline import (
    Progress,
    RooflineRun,
    keep_faster,
    level_bandwidth,
    missing_levels,
    named_levels,
    never_falling,
    sweep_levels,
)
from rooftune.machine.sweep_plan import (
    SweepStop,
    cache_peaks,
    kernel_dram,
    merge_best,
    plan_sweep,
)
from rooftune.platform.sysfs import available_memory

if TYPE_CHECKING:
    from rooftune.platform import Platform

#: The FMA peaks: precision and the NumPy dtype of its kernel.
FMA_PEAKS = (("fp32", "float32"), ("fp64", "float64"))
#: The precisions of the GEMM roofs, each a ``gemm_<precision>`` roof.
GEMM_PRECISIONS = ("fp32", "bf16", "int8")


class CpuRun(RooflineRun):
    """The probes of one CPU on ``threads`` (increasing; the last is the team of the sweep) for
    ``precisions``, and what they measured so far."""

    def __init__(self, platform: Platform, *, threads: tuple[int, ...], precisions: tuple[str, ...],
                 quick: bool, progress: Progress | None) -> None:
        self.effort = probes.QUICK if quick else probes.FULL
        self.steal = Steal()
        super().__init__(progress, quick)
        self.platform = platform
        self.threads = threads
        self.precisions = precisions
        self.cpus = platform.usable_cpus()
        self.top = max(threads)
        self.team_cpus = self.cpus[: self.top]
        self.per_thread: dict[str, dict[int, float]] = {}
        self.details.update({"vector_bytes": platform.vector_bytes, "cpus": list(self.team_cpus)})
        self.capacities = level_capacities(platform, self.team_cpus)
        self.last = last_cache(self.capacities)
        self.last_bytes = self.capacities[self.last] if self.last else 0
        self.min_points = self.effort.min_points
        self.points: dict[str, list[probes.SweepPoint]] = {}
        self.sizes: list[int] = []
        self.stop: SweepStop | None = None
        self.bandwidth: dict[str, float] = {}
        self.bandwidth_by_kernel: dict[str, dict[str, float]] = {}
        self.plateaus: dict[str, list[Plateau]] = {}
        self.dispatch_overhead_s = 0.0

    def run(self) -> Ceilings:
        """Every phase in order; the result (the Measurements are in :attr:`measurements`)."""
        self.peaks()
        self.sweep()
        self.gemm_roofs()
        self.second_looks()
        self.levels()
        self.peaks_again()
        self.dispatch()
        return self.assemble()

    def peaks(self) -> None:
        """The FMA peaks on every thread count, the chain count chosen on one thread."""
        for precision, dtype in FMA_PEAKS:
            if precision in self.precisions:
                self.step(f"FMA peak {precision}")
                r = probes.fma_peak(dtype, self.cpus, self.threads, self.platform.vector_bytes, self.effort)
                self.per_thread[precision] = r.flops
                self.peak[precision] = r.flops[self.top]
                self.details[f"fma_{precision}"] = {"chains": r.chains, "lanes": r.lanes}
                self.measurements += r.measurements

    def sweep(self) -> None:
        """The bandwidth sweep on the whole team, until its stop rule has seen DRAM."""
        effort = self.effort
        plan = plan_sweep(self.capacities, effort.steps_per_octave, len(self.team_cpus), available_memory())
        self.stop = SweepStop(self.capacities, plan, self.min_points)
        self.step("bandwidth sweep", 0, len(plan.sizes) * len(effort.sweep_kernels) * effort.sweep_passes)
        self.points = probes.bandwidth_sweep(self.team_cpus, self.platform.vector_bytes, plan.sizes, effort,
                                             progress=self.step, stop=self.stop)
        reached = len(next(iter(self.points.values()))) if self.points else len(plan.sizes)
        self.sizes = list(plan.sizes[:reached])
        if self.points and self.stop.tail_from is None:
            why = "half the memory available" if plan.memory_bound else "its cap"
            self.warnings.append(f"the bandwidth sweep stopped at {self.sizes[-1] / 1024**2:.0f} MiB ({why}) "
                                 "with bandwidth still falling: DRAM is read where the curve had not "
                                 "flattened, and may read high")

    def gemm_roofs(self) -> None:
        """The GEMM roofs on every thread count; a precision the ISA only emulates is skipped."""
        for precision in GEMM_PRECISIONS:
            if precision not in self.precisions:
                continue
            reason = native_support(self.platform, precision)
            if reason:
                self.skipped[f"gemm_{precision}"] = reason
                continue
            self.step(f"GEMM roof {precision}")
            g = probes.gemm_roof(precision, self.threads, self.effort)
            self.per_thread[f"gemm_{precision}"] = g.ops
            self.peak[f"gemm_{precision}"] = g.ops[self.top]
            self.measurements += g.measurement
        self.details["gemm_size"] = self.effort.gemm_size

    def second_looks(self) -> None:
        """The DRAM part of the sweep, the GEMM roofs and the fastest points of every cache level
        measured once more, seconds later: another tenant's memory traffic or a shared core slows
        them for seconds at a time, and each keeps its faster look (interference only ever slows)."""
        effort = self.effort
        dram_from = self.dram_from
        dram = [s for s in self.sizes if dram_from is not None and s >= dram_from]
        if dram and effort.late_dram_pass:
            self._sweep_again(effort.sweep_kernels, dram, "DRAM bandwidth again")
        for precision in GEMM_PRECISIONS:
            name = f"gemm_{precision}"
            if name in self.per_thread and effort.late_gemm:
                self.step(f"GEMM roof {precision} again")
                g = probes.gemm_roof(precision, self.threads, effort)
                self.measurements += g.measurement
                keep_faster(self.per_thread[name], g.ops)
        if effort.late_looks:
            for kind, points in self.points.items():
                at_sizes = [self.sizes[i] for i in cache_peaks(points, self.capacities, self.min_points)]
                if at_sizes:
                    self._sweep_again((kind,), at_sizes, "cache bandwidth again")
        for points in self.points.values():  # the looks kept (the slower ones are in already)
            self.measurements += [p.measurement for p in points]

    @property
    def dram_from(self) -> int | None:
        """The working set (a target size of the sweep) where DRAM starts: where the stop rule
        confirmed it, else twice the last cache; None without a cache to go past."""
        if self.stop is not None and self.stop.dram_start is not None:
            return self.stop.dram_start
        return int(DRAM_MIN_FACTOR * self.last_bytes) if self.last_bytes else None

    def _sweep_again(self, kernels: tuple[str, ...], at_sizes: list[int], name: str) -> None:
        self.step(name, 0, len(at_sizes) * len(kernels))
        points = probes.bandwidth_sweep(self.team_cpus, self.platform.vector_bytes, at_sizes,
                                        replace(self.effort, sweep_passes=1, sweep_kernels=kernels),
                                        progress=lambda _name, done, total: self.step(name, done, total))
        self.measurements.extend(merge_best(self.points, points))

    def levels(self) -> None:
        """Each kernel's plateaus named after the memory levels (DRAM from the flat tail the sweep
        ended on), the last cache's capacity as far as its plateau reached, bandwidth per level."""
        stop = self.stop
        named_by_kernel: dict[str, dict[str, Plateau]] = {}
        for kind, points in self.points.items():
            xs = [p.bytes for p in points]
            ys = [p.bandwidth for p in points]
            named = named_levels(xs, ys, self.capacities, self.min_points)
            if stop is not None and stop.tail_from is not None:
                # The sweep ended on a flat tail: DRAM is that plateau. The stop rule saw target
                # sizes; the points hold the bytes measured (whole blocks).
                start = self.dram_from or 0
                at = {size: x for size, x in zip(self.sizes, xs, strict=True)}
                named["DRAM"] = kernel_dram(xs, ys, at.get(start, start), at[stop.tail_from], self.min_points)
                named = {lvl: named[lvl] for lvl in LEVELS if lvl in named}
                if not named["DRAM"].distinct:
                    self.warnings.append(f"{kind}: bandwidth still fell at the end of the sweep; DRAM is the "
                                         f"median of its {named['DRAM'].points} points over the plateau the "
                                         "sweep ended on")
            named_by_kernel[kind] = named
            distinct_dram = {lvl: p for lvl, p in named.items() if lvl != "DRAM" or p.distinct}
            self.warnings += level_warnings(kind, distinct_dram)
        self.plateaus, self.bandwidth_by_kernel = sweep_levels(named_by_kernel)
        self.bandwidth = level_bandwidth(self.bandwidth_by_kernel, LEVELS)
        self._effective_last_cache()
        self.warnings += missing_levels(self.bandwidth, LEVELS)

    def _effective_last_cache(self) -> None:
        # Where DRAM began below twice the nominal last cache, that cache holds only about as much
        # as its plateau reached (the largest reach over the kernels): the analysis places working
        # sets by this capacity.
        last, last_bytes = self.last, self.last_bytes
        reach = [p.end_bytes for ps in self.plateaus.values() for p in ps if p.level == last and p.distinct]
        early = [p for ps in self.plateaus.values() for p in ps
                 if p.level == "DRAM" and p.distinct and p.start_bytes < DRAM_MIN_FACTOR * last_bytes]
        if last and early and reach and max(reach) < last_bytes:
            self.details["nominal_capacity_bytes"] = dict(self.capacities)
            self.capacities[last] = max(reach)
            self.warnings.append(
                f"{last}: {last_bytes / 1024**2:.0f} MiB in sysfs, but bandwidth falls to DRAM's past "
                f"{max(reach) / 1024**2:.0f} MiB here (a cache shared with other cores or tenants); "
                f"{max(reach) / 1024**2:.0f} MiB is used as its capacity")

    def peaks_again(self) -> None:
        """The FMA peaks once more, seconds later (every count in a full run; a multi-thread peak
        that scaled poorly even after its retries in any run): the host's placement of the vCPUs
        changes over seconds, not milliseconds."""
        for precision, dtype in FMA_PEAKS:
            per = self.per_thread.get(precision, {})
            chains = self.details.get(f"fma_{precision}", {}).get("chains")
            late = [t for t, rate in per.items() if probes.scaled_poorly(rate, t, per.get(1, 0.0))]
            if per and self.effort.late_looks:
                self.step(f"FMA peak {precision} again")
                r = probes.fma_peak(dtype, self.cpus, sorted(per), self.platform.vector_bytes, self.effort,
                                    chains=chains)
            elif late:
                self.step(f"FMA peak {precision} again (it scaled poorly)")
                r = probes.fma_peak(dtype, self.cpus, late, self.platform.vector_bytes, self.effort,
                                    chains=chains, one_thread=per[1])
            else:
                continue
            self.measurements += r.measurements
            keep_faster(per, r.flops)

    def dispatch(self) -> None:
        """The dispatch overhead, the last step of the run."""
        self.step("dispatch overhead")
        self.dispatch_overhead_s, m = probes.dispatch_overhead(self.effort)
        self.measurements.append(m)
        self.close_steps()

    def assemble(self) -> Ceilings:
        """The Ceilings, with what the run warns of."""
        # Only the FMA peaks must scale linearly on distinct cores; a GEMM's scaling is limited by
        # its size and by memory, so it is no sign of sharing.
        for name, _ in FMA_PEAKS:
            per = self.per_thread.get(name, {})
            one = per.get(1, 0.0)
            for t, rate in per.items():
                if probes.scaled_poorly(rate, t, one):
                    self.warnings.append(
                        f"{name} on {t} threads reached only {rate / one:.2f}x its 1-thread rate after "
                        f"{probes.SCALING_RETRIES + 1} tries: the CPUs shared a physical core (SMT siblings, "
                        "or a host running the vCPUs on one core); re-run with --refresh to measure again"
                    )
        # The peaks on max(threads) are set here, after every second look.
        for name, per in self.per_thread.items():
            self.warnings += never_falling(name, per, warn_below=probes.SCALING_FLOOR)
            if name in self.peak:
                self.peak[name] = per[self.top]
        self.details["steal_share"] = self.steal.share()
        stolen = steal_warning(self.details["steal_share"], "the run")
        if stolen:
            self.warnings.append(stolen + "; re-run with --refresh on a quieter machine")
        return self.result(
            Ceilings,
            advice="on a quieter machine",
            platform=self.platform,
            threads=self.threads,
            peak_flops_per_thread=self.per_thread,
            bandwidth=self.bandwidth,
            bandwidth_by_kernel=self.bandwidth_by_kernel,
            plateaus=self.plateaus,
            sweep={k: [(p.bytes, p.bandwidth) for p in pts] for k, pts in self.points.items()},
            capacity_bytes=self.capacities,
            dispatch_overhead_s=self.dispatch_overhead_s,
        )
