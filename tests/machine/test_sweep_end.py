"""Where the bandwidth sweep ends, and where DRAM's ceiling is read: fake bandwidth curves stand in
for the kernels, so these tests check the sweep's logic, never a speed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from rooftune.bench import Measurement, Method, Policy
from rooftune.machine import ceilings as ceilings_mod
from rooftune.machine import cpu_run, probes
from rooftune.machine import sweep_plan as sweep_mod
from rooftune.machine.plateaus import PLATEAU_TOLERANCE, dram_confirmed, dram_tail
from rooftune.platform import current_platform
from rooftune.platform.sysfs import CacheLevel

KiB, MiB, GiB = 1024, 1024**2, 1024**3
CAPS = {"L1": 96 * KiB, "L2": 4 * MiB, "L3": 32 * MiB}
MEASUREMENT = Measurement(label="x", samples=(1.0, 1.0, 1.0), number=1, method=Method(policy=Policy()))


def caches(l3: int, cpus: tuple[int, ...]) -> tuple[CacheLevel, ...]:
    """A 48 KiB L1 and a 2 MiB L2 per core; one L3 of ``l3`` bytes shared by the team."""
    return (CacheLevel(1, "Data", 48 * KiB, tuple((c,) for c in cpus)),
            CacheLevel(2, "Unified", 2 * MiB, tuple((c,) for c in cpus)),
            CacheLevel(3, "Unified", l3, (tuple(cpus),)))


def cache_rate(s: float, l3_end: float) -> float | None:
    """A team of two cores: L1 to 80 KiB, L2 from 160 KiB to 3 MiB, L3 from 6 MiB to ``l3_end``."""
    if s <= 80 * KiB:
        return 800e9
    if s < 160 * KiB:
        return 400e9
    if s <= 3 * MiB:
        return 300e9
    if s < 6 * MiB:
        return 150e9
    if s <= l3_end:
        return 60e9
    return None


def falling_until(knee: float, dram: float = 20e9, start: float = 64 * MiB, l3_end: float = 24 * MiB,
                  per_octave: float = 1.25) -> Callable[[float], float]:
    """A curve whose DRAM part falls by ``per_octave`` each octave from ``start`` up to ``knee``,
    then is flat at ``dram``."""

    def rate(s: float) -> float:
        cached = cache_rate(s, l3_end)
        if cached is not None:
            return cached
        if s < start:
            return 45e9  # the transition out of L3
        return dram * per_octave ** max(0.0, math.log2(knee / max(s, start)))
    return rate


@dataclass
class FakeRun:
    """measure_ceilings with every probe faked; the sweep follows ``first`` (the first look) and
    ``late`` (every later look), and honours the stop rule as the real sweep does."""

    first: Callable[[float], float]
    late: Callable[[float], float] | None = None
    swept: list[list[int]] = field(default_factory=list)

    def bandwidth_sweep(self, cpus, vector_bytes, sizes, effort, progress=None, stop=None):  # type: ignore[no-untyped-def]
        curve = self.first if not self.swept else (self.late or self.first)
        done: list[int] = []
        for s in sizes:
            done.append(s)
            if stop is not None and stop([(x, curve(x)) for x in done]):
                break
        self.swept.append(done)
        return {k: [probes.SweepPoint(bytes=s, bandwidth=curve(s), measurement=MEASUREMENT) for s in done]
                for k in effort.sweep_kernels}

    def run(self, monkeypatch: pytest.MonkeyPatch, l3: int, quick: bool = False,
            memory: int | None = 64 * GiB) -> ceilings_mod.Ceilings:
        base = current_platform()
        platform = replace(base, caches=caches(l3, base.usable_cpus()))
        monkeypatch.setattr(cpu_run, "available_memory", lambda: memory)
        monkeypatch.setattr(probes, "fma_peak", lambda *a, **k: probes.PeakResult({1: 1.0, 2: 2.0}, 12, 16,
                                                                                   (MEASUREMENT,)))
        monkeypatch.setattr(probes, "bandwidth_sweep", self.bandwidth_sweep)
        monkeypatch.setattr(probes, "gemm_roof", lambda kind, threads, effort: probes.GemmResult(
            {1: 1.0, 2: 2.0}, (MEASUREMENT,)))
        monkeypatch.setattr(probes, "dispatch_overhead", lambda effort: (1e-6, MEASUREMENT))
        c, _ = ceilings_mod.measure_ceilings(platform, threads=(1, 2), precisions=("fp32",), quick=quick)
        return c


def test_a_curve_still_falling_at_4x_the_l3_makes_the_sweep_go_further(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """32 MiB of L3: the sweep is planned to 8x it (256 MiB), where the curve still falls; it goes on
    until the last octave is flat, and DRAM is read there."""
    run = FakeRun(falling_until(knee=1 * GiB))
    c = run.run(monkeypatch, l3=32 * MiB)
    first = run.swept[0]
    # past the knee, until an octave of points agree within the tolerance, and no further
    assert 1 * GiB < max(first) < 2 * GiB
    assert c.bandwidth["DRAM"] == 20e9
    [dram] = [p for p in c.plateaus["triad"] if p.level == "DRAM"]
    assert dram.distinct and dram.start_bytes >= 800 * MiB  # the floor, and points within the tolerance of it
    assert not any("still falling" in w or "still fell" in w for w in c.warnings)


def test_a_flat_curve_ends_the_sweep_once_dram_is_confirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    run = FakeRun(falling_until(knee=64 * MiB, dram=30e9))  # flat from 64 MiB, 2x the L3
    c = run.run(monkeypatch, l3=32 * MiB)
    first = run.swept[0]
    # past 4x the L3, and ended once the DRAM plateau spans its two octaves (4x its start)
    assert 4 * 32 * MiB <= max(first) <= 256 * MiB
    assert c.bandwidth["DRAM"] == 30e9


def test_the_four_times_rule_uses_the_l3_the_cores_see(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 480 MiB socket-wide L3 of which the team sees ~100 MiB: the sweep ends neither at 4x the
    nominal 480 MiB nor at 8x it, but where DRAM is flat past 4x what the plateau reached."""
    run = FakeRun(falling_until(knee=256 * MiB, dram=30e9, start=160 * MiB, l3_end=100 * MiB))
    c = run.run(monkeypatch, l3=480 * MiB)
    first = run.swept[0]
    assert 4 * 100 * MiB <= max(first) < 4 * 480 * MiB
    assert c.bandwidth["DRAM"] == 30e9
    assert c.capacity_bytes["L3"] <= 100 * MiB  # the effective L3, as stored


def test_dram_comes_from_the_plateau_not_from_a_best_look_in_the_falling_region(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first look falls from 64 MiB (2x the L3) to a 30 GB/s floor from 512 MiB; the late look
    at the DRAM points reads 60 GB/s below 320 MiB (a shared L3 that held more for a while). Each
    point keeps its best look, yet DRAM is the median of the flat tail, not the fastest run of
    points past the L3."""
    first = falling_until(knee=512 * MiB, dram=30e9, per_octave=1.22)

    def late(s: float) -> float:
        return 60e9 if s <= 320 * MiB else 0.95 * first(s)

    run = FakeRun(first, late)
    c = run.run(monkeypatch, l3=32 * MiB)
    _, dram_look, *_ = run.swept
    points = dict(c.sweep["triad"])
    raised = [s for s in dram_look if s <= 320 * MiB]
    assert len(raised) >= 2 and all(points[s] == 60e9 for s in raised)
    assert c.bandwidth["DRAM"] == 30e9
    assert all(bw["DRAM"] == 30e9 for bw in c.bandwidth_by_kernel.values())
    [dram] = [p for p in c.plateaus["triad"] if p.level == "DRAM"]
    assert dram.start_bytes > 320 * MiB


def test_the_sweep_never_goes_past_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    never_flat = falling_until(knee=64 * GiB)
    monkeypatch.setattr(sweep_mod, "MAX_SWEEP_BYTES", 1 * GiB)
    run = FakeRun(never_flat)
    c = run.run(monkeypatch, l3=32 * MiB, quick=True)
    assert max(run.swept[0]) == 1 * GiB
    assert any(w.startswith("the bandwidth sweep stopped at 1024 MiB (its cap) with bandwidth still falling")
               for w in c.warnings)
    # a safe share of the memory available caps it below the constant
    run = FakeRun(never_flat)
    c = run.run(monkeypatch, l3=32 * MiB, quick=True, memory=1 * GiB)
    share = sweep_mod.SWEEP_MEMORY_SHARE * GiB / sweep_mod.SWEEP_ARRAYS_FACTOR
    assert share / 2 < max(run.swept[0]) <= share
    assert any("(half the memory available) with bandwidth still falling" in w for w in c.warnings)


def test_a_plan_runs_to_its_cap_and_plans_8x_the_last_cache() -> None:
    plan = sweep_mod.plan_sweep(CAPS, 3, 2, memory=64 * GiB)
    assert plan.planned_bytes == 8 * 32 * MiB and plan.cap_bytes == sweep_mod.MAX_SWEEP_BYTES
    assert max(plan.sizes) == sweep_mod.MAX_SWEEP_BYTES and not plan.memory_bound
    small = sweep_mod.plan_sweep(CAPS, 3, 2, memory=2 * GiB)
    assert small.memory_bound and max(small.sizes) <= small.cap_bytes < GiB
    assert small.cap_bytes * sweep_mod.SWEEP_ARRAYS_FACTOR <= sweep_mod.SWEEP_MEMORY_SHARE * 2 * GiB
    # a cap off the geometric grid, below the planned 8x: the plan ends at its largest size
    tiny = sweep_mod.plan_sweep(CAPS, 3, 2, memory=512 * MiB)
    assert tiny.cap_bytes == max(tiny.sizes) == tiny.planned_bytes == 128 * MiB
    # a huge nominal L3 plans no further than the cap
    assert sweep_mod.plan_sweep({**CAPS, "L3": 2 * GiB}, 3, 2, memory=None).planned_bytes == plan.cap_bytes


def test_a_tail_is_flat_once_its_last_octave_agrees_within_the_tolerance() -> None:
    sizes = [int(64 * MiB * 2 ** (i / 3)) for i in range(10)]  # 64 MiB .. 512 MiB
    falling = [50e9 * 0.93**i for i in range(10)]  # 7 % a step, 20 % an octave
    assert dram_tail(sizes, falling, min_points=3) is None
    flat = [50e9, 45e9, 40e9, 35e9, 31e9, 30e9, 30.5e9, 29.5e9, 30e9, 30e9]
    tail = dram_tail(sizes, flat, min_points=3)
    assert tail is not None and tail.start_bytes == sizes[4] and tail.end_bytes == sizes[-1]
    assert tail.bandwidth == 30e9 and tail.level == "DRAM"
    # a point slowed by interference neither cuts the run nor pulls its median
    slowed = flat[:7] + [12e9] + flat[8:]
    tail = dram_tail(sizes, slowed, min_points=3)
    assert tail is not None and tail.start_bytes == sizes[4] and tail.bandwidth == 30e9
    # one point per octave (--quick): the last two points agree within the tolerance
    octaves = [int(64 * MiB * 2**i) for i in range(4)]
    assert dram_tail(octaves, [45e9, 38e9, 33e9, 29e9], min_points=2) is None  # 12-14 % an octave
    assert dram_tail(octaves, [45e9, 38e9, 31e9, 30e9], min_points=2) is not None
    assert (1 + PLATEAU_TOLERANCE) * 29e9 < 33e9


def test_dram_is_confirmed_only_past_4x_the_last_cache() -> None:
    rate = falling_until(knee=64 * MiB, dram=30e9)  # flat from 64 MiB
    sizes = [int(8 * KiB * 2 ** (i / 3)) for i in range(3 * 17 + 1)]  # 8 KiB .. 1 GiB
    points = [(s, rate(s)) for s in sizes]
    ends = [s for i, (s, _) in enumerate(points) if dram_confirmed(points[: i + 1], CAPS, 3, 64 * MiB)]
    assert ends and ends[0] >= 4 * CAPS["L3"]
    # a last cache four times larger needs a sweep four times longer
    big = {**CAPS, "L3": 128 * MiB}
    rate = falling_until(knee=256 * MiB, dram=30e9, l3_end=96 * MiB)
    points = [(s, rate(s)) for s in sizes]
    ends = [s for i, (s, _) in enumerate(points) if dram_confirmed(points[: i + 1], big, 3, 64 * MiB)]
    assert ends and ends[0] >= 4 * big["L3"]
