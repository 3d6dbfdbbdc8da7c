"""The measurements behind the ceilings: FMA peaks, bandwidth sweep, GEMM roofs, dispatch overhead.

Each probe times through :mod:`rooftune.bench` and returns rates together with the Measurements
they came from. Ceilings are upper bounds, so a probe's rate comes from its fastest sample (see
:data:`CEILING_ESTIMATOR`).
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rooftune.bench import Measurement, Policy, measure
from rooftune.machine.kernels import (
    STREAM_ARRAYS,
    STREAM_UNROLL,
    aligned_empty,
    fma_kernel,
    fma_state,
    stream_kernel,
)
from rooftune.machine.plateaus import SweepEnd
from rooftune.machine.roofline import Progress, RooflineEffort
from rooftune.machine.team import ThreadTeam

#: Ceilings are upper bounds. Other tenants and the OS can only slow a kernel down, so the fastest
#: sample (each sample is a >= 5 ms run of the kernel on every thread) estimates what the hardware
#: can do; ERT and likwid-bench report their best run the same way. The median, IQR and warnings
#: of every Measurement are stored beside it.
CEILING_ESTIMATOR = "best sample"

#: Length of one timed call of a kernel on the whole team. Waking the team costs ~50 us, so 5 ms
#: keeps that below 1 % of what is timed.
CALL_TIME_S = 0.005

#: Pilot rounds before giving up on calibration (each at least doubles the work per call).
MAX_PILOT_ROUNDS = 48
#: Growing the work by k must grow a pilot's time by at least 0.6 k for the time to be trusted.
WORK_DOMINATED_FRACTION = 0.6


@dataclass(frozen=True, kw_only=True)
class Effort(RooflineEffort):
    """How hard the CPU's probes try: the full run or --quick. To what every device's effort holds
    (:class:`rooftune.machine.roofline.RooflineEffort`) it adds the FMA chain counts, the sweep's
    passes and the second looks at DRAM and the GEMM roofs; its ``late_looks`` also looks once more
    at the fastest points of every cache level's plateau."""

    #: The FMA chain counts tried on a core with 32 vector registers, and with 16.
    chain_candidates_32reg: tuple[int, ...]
    chain_candidates_16reg: tuple[int, ...]
    #: Passes over the sweep; each point keeps its best pass, so a burst of interference from
    #: another tenant spoils one pass of a few points, not the level.
    sweep_passes: int = 1
    #: Measure the DRAM points of the sweep, and the GEMM roofs, once more at the end of the run.
    late_dram_pass: bool = False
    late_gemm: bool = False


FULL = Effort(
    quick=False,
    steps_per_octave=3,
    sweep_kernels=("read", "copy", "triad"),
    # FMA latency 4-5 cycles x 2 pipes needs >= 8-10 chains; more than registers-2 spills.
    chain_candidates_32reg=(8, 12, 16),
    chain_candidates_16reg=(8, 12),
    peak_policy=Policy(number=1, warmup_s=0.02, budget_s=0.25),
    sweep_policy=Policy(number=1, warmup_s=0.005, budget_s=0.045),
    sweep_passes=2,
    late_dram_pass=True,
    late_gemm=True,
    late_looks=True,
    gemm_policy=Policy(number=1, warmup_s=0.03, budget_s=0.3),
    # 1024^3 sgemm: packing and edge effects are a few % of it, yet 6 samples fit in 0.5 s on 1 core.
    gemm_size=1024,
)
QUICK = Effort(
    quick=True,
    steps_per_octave=1,
    sweep_kernels=("triad",),
    chain_candidates_32reg=(12,),
    chain_candidates_16reg=(12,),
    peak_policy=Policy(number=1, warmup_s=0.01, budget_s=0.08),
    sweep_policy=Policy(number=1, warmup_s=0.005, budget_s=0.04),
    gemm_policy=Policy(number=1, warmup_s=0.01, budget_s=0.1),
    gemm_size=768,
)

_PILOT = Policy(number=1, warmup_s=0.0, budget_s=0.0, min_samples=3, max_samples=3)


def _best_rate(m: Measurement, work: float) -> float:
    return m.rate(work, best=True)


def units_for_call_time(make_call: Callable[[int], Callable[[], Any]]) -> int:
    """Units of work (iterations, passes) per call so that one call lasts about CALL_TIME_S.

    The first call compiles and warms up and is not used. Pilot calls then grow the work until
    (a) a call lasts at least a quarter of the target and (b) the last growth in work showed up
    in the time (at least WORK_DOMINATED_FRACTION of it). Without (b), a team whose wake-up is
    slow (a fresh team, a busy scheduler) makes a call of 2 iterations look long enough, and the
    measurement times the wake-up instead of the kernel.
    """
    make_call(1)()
    units = 1
    previous: tuple[int, float] | None = None
    for _ in range(MAX_PILOT_ROUNDS):
        # The fastest of 3 pilot calls, so that one preempted call does not decide.
        t = max(measure(make_call(units), label="pilot", policy=_PILOT).min, 1e-9)
        if (
            previous is not None
            and t >= CALL_TIME_S / 4
            and t / previous[1] >= WORK_DOMINATED_FRACTION * units / previous[0]
        ):
            return max(1, math.ceil(units * CALL_TIME_S / t))
        previous = (units, t)
        units *= max(2, math.ceil(CALL_TIME_S / 4 / t)) if t < CALL_TIME_S / 4 else 2
    return units


# ----------------------------------------------------------------------------- FMA peak


#: A compute-bound kernel on t threads must reach this share of t times its 1-thread rate, else it
#: is measured again (up to SCALING_RETRIES times, SCALING_PAUSE_S apart) and the best kept. On a
#: shared VM the host sometimes runs both vCPUs on one physical core for a while, and the 2-thread
#: FMA peak then reads about the 1-thread value (BENCHMARKS.md, "Ceilings against likwid-bench").
SCALING_FLOOR = 0.75
SCALING_RETRIES = 3
SCALING_PAUSE_S = 0.2


def scaled_poorly(rate: float, threads: int, one_thread: float) -> bool:
    """Whether ``rate`` on ``threads`` threads is below :data:`SCALING_FLOOR` of linear scaling."""
    return threads > 1 and one_thread > 0 and rate < SCALING_FLOOR * threads * one_thread


def with_retries(measure_once: Callable[[], tuple[float, Measurement]], threads: int,
                 one_thread: float) -> tuple[float, list[Measurement]]:
    """``measure_once()`` again while it scales poorly (see :data:`SCALING_FLOOR`); the best rate
    and every Measurement taken."""
    rate, m = measure_once()
    taken = [m]
    for _ in range(SCALING_RETRIES):
        if not scaled_poorly(rate, threads, one_thread):
            break
        time.sleep(SCALING_PAUSE_S)
        again, m = measure_once()
        taken.append(m)
        rate = max(rate, again)
    return rate, taken


@dataclass(frozen=True)
class PeakResult:
    flops: dict[int, float]  # threads -> FLOP/s
    chains: int
    lanes: int
    measurements: tuple[Measurement, ...]


def fma_peak(
    dtype: str, cpus: tuple[int, ...], threads: Sequence[int], vector_bytes: int, effort: Effort,
    chains: int | None = None, one_thread: float | None = None,
) -> PeakResult:
    """Peak FLOP/s of independent vector FMA chains on 1..N threads for ``dtype`` (float32/float64).

    ``chains`` (the chain count an earlier call chose) skips the search for the chain count;
    with ``one_thread`` (that call's 1-thread rate) too, only the multi-thread peaks are measured."""
    lanes = vector_bytes // np.dtype(dtype).itemsize
    registers = 32 if vector_bytes == 64 else 16
    candidates = effort.chain_candidates_32reg if registers == 32 else effort.chain_candidates_16reg
    measurements: list[Measurement] = []
    precision = "fp32" if dtype == "float32" else "fp64"

    def run_on(team: ThreadTeam, chains: int) -> tuple[float, Measurement]:
        kernel = fma_kernel(dtype, lanes, chains)
        states = team.run(lambda i: fma_state(dtype, lanes, chains))

        def call(iters: int) -> Callable[[], Any]:
            return lambda: team.run(lambda i: kernel(iters, states[i]))

        iters = units_for_call_time(call)
        work = 2.0 * chains * lanes * iters * team.size
        m = measure(
            call(iters),
            label=f"peak.{precision}",
            params={"threads": team.size, "chains": chains, "lanes": lanes, "iters": iters,
                    "flops_per_call": work},
            policy=effort.peak_policy,
        )
        return _best_rate(m, work), m

    best_chains, best_rate = candidates[0], -1.0
    if chains is not None and one_thread is not None:
        best_chains, best_rate = chains, one_thread
    else:
        with ThreadTeam(cpus[:1]) as team:
            for c in candidates if chains is None else (chains,):
                rate, m = run_on(team, c)
                measurements.append(m)
                if rate > best_rate:
                    best_chains, best_rate = c, rate
    flops: dict[int, float] = {}
    for t in threads:
        if t == 1:  # already measured with the chosen chain count
            flops[1] = best_rate
            continue
        with ThreadTeam(cpus[:t]) as team:
            flops[t], taken = with_retries(functools.partial(run_on, team, best_chains), t, best_rate)
            measurements += taken
    return PeakResult(flops=flops, chains=best_chains, lanes=lanes, measurements=tuple(measurements))


# ----------------------------------------------------------------------------- bandwidth sweep


@dataclass(frozen=True)
class SweepPoint:
    bytes: int  # actual working set, all threads and arrays
    bandwidth: float  # bytes/s
    measurement: Measurement


def bandwidth_sweep(
    cpus: tuple[int, ...],
    vector_bytes: int,
    sizes: Sequence[int],
    effort: Effort,
    progress: Progress | None = None,
    stop: Callable[[list[tuple[int, float]]], SweepEnd | None] | None = None,
) -> dict[str, list[SweepPoint]]:
    """Bandwidth of each stream kernel at each total working set, on a team pinned to ``cpus``.

    ``stop``, when given, is asked after each point of the first kernel's first pass (the last
    one too) with that kernel's (size, bandwidth) so far; once it answers with a
    :class:`SweepEnd` rather than None, every kernel and pass ends at that point's size (the sweep
    has seen what it needs: a confirmed DRAM plateau). With ``effort.late_dram_pass``, passes after
    the first skip the sizes from the end's ``dram_from`` on: the caller looks at the DRAM points
    again at the end of the run, seconds later, which a pass right after the first does not add to.
    """
    lanes = vector_bytes // 4
    team_size = len(cpus)
    max_elems = max(sizes) // team_size // 4 + lanes * 8
    best: dict[tuple[str, int], SweepPoint] = {}
    calibrated: dict[tuple[str, int], int] = {}
    sizes = list(sizes)
    total = len(sizes) * len(effort.sweep_kernels) * effort.sweep_passes
    done = 0
    with ThreadTeam(cpus) as team:

        def allocate(_: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            # Untouched pages cost nothing: memory is committed by the first touch below, only as
            # far as the sweep reaches (a sweep that stops early never commits the rest).
            return (aligned_empty(max_elems), aligned_empty(max_elems // 2 + lanes * 8),
                    aligned_empty(max_elems // 3 + lanes * 8))

        data = team.run(allocate)
        touched = 0

        def touch(n: int) -> None:
            nonlocal touched
            if n > touched:
                start = touched
                team.run(lambda i: [arr[start:n].fill(1.0) for arr in data[i]])  # on the worker's own core
                touched = n

        first = True
        dram_from: int | None = None
        for pass_, kind in itertools.product(range(effort.sweep_passes), effort.sweep_kernels):
            kernel = stream_kernel(kind, lanes)
            n_arrays = STREAM_ARRAYS[kind]
            block = lanes * STREAM_UNROLL[kind]
            seen: list[tuple[int, float]] = []
            for size in sizes:
                if pass_ and effort.late_dram_pass and dram_from is not None and size >= dram_from:
                    break
                n = max(block, (size // team_size // n_arrays // 4) // block * block)
                touch(n)
                views = [tuple(arr[:n] for arr in d) for d in data]
                bytes_per_rep = n * 4 * n_arrays * team_size

                def call(reps: int, views: list[Any] = views, kernel: Any = kernel) -> Callable[[], Any]:
                    s = np.float32(0.5)
                    return lambda: team.run(lambda i: kernel(views[i][0], views[i][1], views[i][2], s, reps))

                # later passes time the same calls: the first pass's calibration holds for them
                if (kind, size) not in calibrated:
                    calibrated[kind, size] = units_for_call_time(call)
                reps = calibrated[kind, size]
                work = float(reps * bytes_per_rep)
                m = measure(
                    call(reps),
                    label=f"bandwidth.{kind}",
                    params={"bytes": bytes_per_rep, "threads": team_size, "reps": reps,
                            "bytes_per_call": work},
                    policy=effort.sweep_policy,
                )
                point = SweepPoint(bytes=bytes_per_rep, bandwidth=_best_rate(m, work), measurement=m)
                if (kind, size) not in best or point.bandwidth > best[kind, size].bandwidth:
                    best[kind, size] = point
                done += 1
                seen.append((size, point.bandwidth))
                end = stop(seen) if first and stop is not None else None
                ended = end is not None
                if end is not None:
                    sizes = sizes[: sizes.index(size) + 1]
                    dram_from = end.dram_from
                    later = sum(1 for s in sizes
                                if not effort.late_dram_pass or dram_from is None or s < dram_from)
                    total = len(sizes) * len(effort.sweep_kernels) + later * len(effort.sweep_kernels) * (
                        effort.sweep_passes - 1)
                if progress:
                    progress("bandwidth sweep", done, total)
                if ended:
                    break
            first = False
    return {k: [best[k, s] for s in sizes] for k in effort.sweep_kernels}


# ----------------------------------------------------------------------------- GEMM roofs


@dataclass(frozen=True)
class GemmResult:
    ops: dict[int, float]  # threads -> ops/s (FLOP/s for float types)
    measurement: tuple[Measurement, ...]


def gemm_roof(kind: str, threads: Sequence[int], effort: Effort) -> GemmResult:
    """Practical GEMM roof through torch: ``fp32`` (sgemm), ``bf16`` (oneDNN) or ``int8`` (_int_mm)."""
    import torch

    n = effort.gemm_size
    gen = torch.Generator().manual_seed(0)
    if kind == "int8":
        a = torch.randint(-64, 64, (n, n), dtype=torch.int8, generator=gen)
        b = torch.randint(-64, 64, (n, n), dtype=torch.int8, generator=gen)

        def op() -> Any:
            return torch._int_mm(a, b)

    else:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[kind]
        a = torch.randn(n, n, generator=gen).to(dtype)
        b = torch.randn(n, n, generator=gen).to(dtype)

        def op() -> Any:
            return torch.mm(a, b)

    previous = torch.get_num_threads()
    ops: dict[int, float] = {}
    ms: list[Measurement] = []
    work = 2.0 * n**3
    try:
        for t in threads:
            torch.set_num_threads(t)

            m = measure(
                op,
                label=f"gemm.{kind}",
                params={"threads": t, "m": n, "n": n, "k": n, "ops_per_call": work},
                policy=effort.gemm_policy,
            )
            ops[t] = _best_rate(m, work)
            ms.append(m)
    finally:
        torch.set_num_threads(previous)
    return GemmResult(ops=ops, measurement=tuple(ms))


# ----------------------------------------------------------------------------- dispatch overhead


def dispatch_overhead(effort: Effort) -> tuple[float, Measurement]:
    """Time of one tiny eager op (``torch.add`` of two 1-element tensors) on one thread: the floor of
    the time-based roofline, below which no op of the framework can go."""
    import torch

    x = torch.ones(1)
    y = torch.ones(1)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = replace(effort.peak_policy, number=None, min_sample_time_s=0.002)
        m = measure(lambda: torch.add(x, y), label="dispatch.add", params={"numel": 1}, policy=policy)
    finally:
        torch.set_num_threads(previous)
    return m.min, m
