"""The microkernels compute what they claim (so the FLOPs and bytes they are credited with are real)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rooftune.machine.kernels import STREAM_UNROLL, aligned_empty, fma_kernel, fma_state, stream_kernel
from rooftune.machine.plateaus import SweepEnd, sweep_sizes
from rooftune.machine.team import ThreadTeam


def test_aligned_empty_is_64_byte_aligned() -> None:
    for n in (1, 17, 1000):
        assert aligned_empty(n).ctypes.data % 64 == 0


@pytest.mark.parametrize("dtype,lanes", [("float32", 8), ("float64", 4)])
def test_fma_kernel_matches_numpy(dtype: str, lanes: int) -> None:
    chains = 4
    state = fma_state(dtype, lanes, chains)
    expected = state[: chains * lanes].astype(np.float64)
    mul, add = float(state[chains * lanes]), float(state[(chains + 1) * lanes])
    for _ in range(3):
        expected = expected * mul + add
    fma_kernel(dtype, lanes, chains)(3, state)
    np.testing.assert_allclose(state[: chains * lanes], expected, rtol=1e-6)


def test_stream_kernels_compute_read_copy_triad() -> None:
    lanes = 8
    n = lanes * max(STREAM_UNROLL.values()) * 4
    a, b, c = aligned_empty(n), aligned_empty(n), aligned_empty(n)
    b[:] = np.arange(n, dtype=np.float32)
    c[:] = 2.0
    stream_kernel("triad", lanes)(a, b, c, np.float32(0.5), 2)
    np.testing.assert_array_equal(a, b + 1.0)
    stream_kernel("copy", lanes)(a, c, c, np.float32(0.0), 1)
    np.testing.assert_array_equal(a, c)
    total = stream_kernel("read", lanes)(c, c, c, np.float32(0.0), 3)
    assert total == pytest.approx(3 * 2.0 * n)


def test_team_runs_task_on_every_worker_and_reraises() -> None:
    with ThreadTeam((0, 0)) as team:
        assert team.run(lambda i: i * 10) == [0, 10]

        def boom(i: int) -> None:
            raise ValueError(f"worker {i}")

        with pytest.raises(ValueError, match="worker"):
            team.run(boom)
        assert team.run(lambda i: i) == [0, 1]  # still usable after an error


def test_a_multi_thread_rate_that_does_not_scale_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.machine import probes

    monkeypatch.setattr(probes, "SCALING_PAUSE_S", 0.0)
    rates = iter([240.0, 250.0, 470.0, 480.0])  # two vCPUs on one core, then on two
    rate, taken = probes.with_retries(lambda: (next(rates), object()), threads=2, one_thread=236.0)
    assert rate == 470.0 and len(taken) == 3  # stops once it scales
    stuck = iter([240.0] * 10)
    rate, taken = probes.with_retries(lambda: (next(stuck), object()), threads=2, one_thread=236.0)
    assert rate == 240.0 and len(taken) == 1 + probes.SCALING_RETRIES
    assert probes.scaled_poorly(240.0, 2, 236.0) and not probes.scaled_poorly(400.0, 2, 236.0)
    assert not probes.scaled_poorly(240.0, 1, 236.0)  # one thread: nothing to scale
    _, taken = probes.with_retries(lambda: (100.0, object()), threads=1, one_thread=236.0)
    assert len(taken) == 1


def test_a_peak_that_still_scaled_poorly_is_measured_again_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probes are stand-ins; what is checked is measure_ceilings' second look and its warning."""
    from rooftune.bench import Measurement, Method, Policy
    from rooftune.machine import probes
    from rooftune.machine.ceilings import measure_ceilings
    from rooftune.platform import current_platform

    platform = current_platform()
    m = Measurement(label="x", samples=(1.0, 1.0, 1.0), number=1, method=Method(policy=Policy()))
    calls: list[tuple[str, tuple[int, ...], int | None]] = []

    def fma_peak(dtype, cpus, threads, vector_bytes, effort, chains=None, one_thread=None):
        calls.append((dtype, tuple(threads), chains))
        late = chains is not None
        flops = {t: 100.0 if t == 1 else (190.0 if late and dtype == "float32" else 110.0) for t in threads}
        return probes.PeakResult(flops=flops, chains=12, lanes=16, measurements=(m,))

    monkeypatch.setattr(probes, "fma_peak", fma_peak)
    monkeypatch.setattr(probes, "bandwidth_sweep", lambda *a, **k: {})
    monkeypatch.setattr(probes, "dispatch_overhead", lambda effort: (1e-6, m))
    c, _ = measure_ceilings(platform, threads=(1, 2), precisions=("fp32", "fp64"), quick=True)
    assert calls[2:] == [("float32", (2,), 12), ("float64", (2,), 12)]  # a second look, chains known
    assert c.peak_flops["fp32"] == 190.0 and c.peak_flops_per_thread["fp32"][2] == 190.0
    assert c.peak_flops["fp64"] == 110.0
    assert any(w.startswith("fp64 on 2 threads reached only 1.10x") for w in c.warnings)
    assert not any(w.startswith("fp32 on 2 threads") for w in c.warnings)


def test_dram_points_and_gemm_roofs_are_measured_again_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in probes: each DRAM point of the sweep and each GEMM rate keeps the better of its two looks."""
    from rooftune.bench import Measurement, Method, Policy
    from rooftune.machine import probes
    from rooftune.machine.ceilings import measure_ceilings
    from rooftune.platform import current_platform

    platform = current_platform()
    m = Measurement(label="x", samples=(1.0, 1.0, 1.0), number=1, method=Method(policy=Policy()))
    sweeps: list[list[int]] = []

    def bandwidth_sweep(cpus, vector_bytes, sizes, effort, progress=None, stop=None):
        sweeps.append(list(sizes))
        late = len(sweeps) > 1
        # the DRAM look is faster at its largest size, the cache look at its smallest
        faster = max(sizes) if len(sweeps) == 2 else min(sizes)
        rate = {s: (2e10 if s == faster else 5e9) if late else 1e10 for s in sizes}
        return {"triad": [probes.SweepPoint(bytes=s, bandwidth=rate[s], measurement=m) for s in sizes]}

    gemms = iter([{1: 100.0, 2: 150.0}, {1: 90.0, 2: 190.0}])
    monkeypatch.setattr(probes, "fma_peak", lambda *a, **k: probes.PeakResult({1: 1.0, 2: 2.0}, 12, 16, (m,)))
    monkeypatch.setattr(probes, "bandwidth_sweep", bandwidth_sweep)
    monkeypatch.setattr(probes, "gemm_roof", lambda kind, threads, effort: probes.GemmResult(next(gemms), (m,)))
    monkeypatch.setattr(probes, "dispatch_overhead", lambda effort: (1e-6, m))
    c, measurements = measure_ceilings(platform, threads=(1, 2), precisions=("fp32",), quick=False)
    full, dram, cache = sweeps
    last_cache = max(c.capacity_bytes.values())
    assert dram == [s for s in full if s >= 2 * last_cache] and dram
    # the cache look: at most LATE_POINTS_PER_LEVEL points of each cache level, none in DRAM
    assert cache and len(cache) <= 3 * 3 and max(cache) < min(dram)
    points = dict(c.sweep["triad"])
    raised = {max(full), min(cache)}
    assert all(points[s] == 2e10 for s in raised) and all(points[s] == 1e10 for s in full if s not in raised)
    assert c.peak_flops_per_thread["gemm_fp32"] == {1: 100.0, 2: 190.0} and c.peak_flops["gemm_fp32"] == 190.0
    # every look is kept, none twice: the FMA peak and its late look, the sweep, its DRAM and cache
    # looks, two GEMM roofs, the dispatch overhead
    assert len(measurements) == 2 + len(full) + len(dram) + len(cache) + 2 + 1
    assert {"FMA peak fp32 again", "cache bandwidth again", "DRAM bandwidth again"} <= set(c.details["step_s"])


def test_a_roof_does_not_fall_as_threads_are_added(monkeypatch: pytest.MonkeyPatch) -> None:
    from rooftune.bench import Measurement, Method, Policy
    from rooftune.machine import probes
    from rooftune.machine.ceilings import measure_ceilings
    from rooftune.platform import current_platform

    m = Measurement(label="x", samples=(1.0, 1.0, 1.0), number=1, method=Method(policy=Policy()))
    flops = {1: 100.0, 2: 200.0, 3: 190.0, 4: 10.0}  # 4 threads: a worker descheduled for the whole call
    monkeypatch.setattr(probes, "fma_peak", lambda dtype, cpus, threads, *a, **k: probes.PeakResult(
        {t: flops[t] for t in threads}, 12, 16, (m,)))
    monkeypatch.setattr(probes, "bandwidth_sweep", lambda *a, **k: {})
    monkeypatch.setattr(probes, "dispatch_overhead", lambda effort: (1e-6, m))
    c, _ = measure_ceilings(current_platform(), threads=(1, 2, 3, 4), precisions=("fp32",), quick=True)
    assert c.peak_flops_per_thread["fp32"] == {1: 100.0, 2: 200.0, 3: 200.0, 4: 200.0}
    assert c.peak_flops["fp32"] == 200.0
    assert any(w.startswith("fp32 on 4 threads measured") for w in c.warnings)
    assert not any(w.startswith("fp32 on 3 threads measured") for w in c.warnings)  # 5 % below: kept quietly


def test_a_sweep_ends_for_every_kernel_and_pass_where_stop_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from rooftune.machine import probes

    sizes = sweep_sizes(256 * 1024, 1, min_bytes=8192)  # 8 KiB .. 256 KiB
    effort = replace(probes.QUICK, sweep_kernels=("read", "triad"), sweep_passes=2)
    asked: list[int] = []

    def stop(points: list[tuple[int, float]]) -> SweepEnd | None:
        asked.append(len(points))
        return SweepEnd(dram_from=sizes[1]) if len(points) == 3 else None  # "DRAM" from the second size on

    timed: list[str] = []
    real_measure = probes.measure

    def measure(call, **kw):  # type: ignore[no-untyped-def]
        if kw.get("label", "").startswith("bandwidth."):  # the timed points, not the calibration
            timed.append(kw["label"])
        return real_measure(call, **kw)

    monkeypatch.setattr(probes, "measure", measure)
    sweep = probes.bandwidth_sweep((0,), 32, sizes, effort, stop=stop)
    assert asked == [1, 2, 3]  # asked on the first kernel's first pass only, until it said stop
    # point sizes are rounded to whole blocks, so compare against the first three sizes loosely
    assert set(sweep) == {"read", "triad"}
    for pts in sweep.values():
        assert len(pts) == 3
        assert all(abs(p.bytes - s) <= 0.05 * s for p, s in zip(pts, sizes[:3], strict=True))
    assert all(p.bandwidth > 0 for pts in sweep.values() for p in pts)
    assert len(timed) == 2 * 3 * 2  # no late DRAM pass here: the second pass covers every size
    # With a late DRAM pass to come, the second pass stops where the stop rule's DRAM begins.
    asked.clear()
    timed.clear()
    sweep = probes.bandwidth_sweep((0,), 32, sizes, replace(effort, late_dram_pass=True), stop=stop)
    assert all(len(pts) == 3 for pts in sweep.values())
    assert len(timed) == 2 * 3 + 2 * 1  # first pass: 3 sizes per kernel; second: the first size only
    # An end without DRAM seen cuts no pass short; the rule is asked at the last size too.
    asked.clear()
    timed.clear()

    def end_unseen(points: list[tuple[int, float]]) -> SweepEnd | None:
        asked.append(len(points))
        return SweepEnd(dram_from=None) if len(points) == 3 else None

    sweep = probes.bandwidth_sweep((0,), 32, sizes[:3], replace(effort, late_dram_pass=True), stop=end_unseen)
    assert asked == [1, 2, 3] and all(len(pts) == 3 for pts in sweep.values())
    assert len(timed) == 2 * 3 * 2


def test_a_shared_last_cache_gets_the_capacity_the_sweep_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in sweep with the shape of a 2-vCPU VM on a 480 MiB-L3 Xeon: the sweep ends early,
    DRAM is named from ~200 MiB, and L3's capacity is what its plateau reached."""
    from dataclasses import replace

    from rooftune.bench import Measurement, Method, Policy
    from rooftune.machine import probes
    from rooftune.machine.ceilings import measure_ceilings
    from rooftune.platform import current_platform
    from rooftune.platform.sysfs import CacheLevel

    KiB, MiB = 1024, 1024**2
    base = current_platform()
    cpus = base.usable_cpus()
    caches = (CacheLevel(1, "Data", 48 * KiB, tuple((c,) for c in cpus)),
              CacheLevel(2, "Unified", 2 * MiB, tuple((c,) for c in cpus)),
              CacheLevel(3, "Unified", 480 * MiB, (tuple(cpus),)))
    platform = replace(base, caches=caches)
    m = Measurement(label="x", samples=(1.0, 1.0, 1.0), number=1, method=Method(policy=Policy()))

    def rate(s: int) -> float:
        return (800e9 if s <= 80 * KiB else 330e9 if 160 * KiB <= s <= 1.6 * MiB else 57e9 if 6 * MiB <= s <= 90 * MiB
                else 30e9 if s >= 200 * MiB else 150e9 if s < 6 * MiB else 44e9)

    swept: list[list[int]] = []

    def bandwidth_sweep(cpus, vector_bytes, sizes, effort, progress=None, stop=None):
        done: list[int] = []
        for s in sizes:
            done.append(s)
            if stop is not None and stop([(x, rate(x)) for x in done]):
                break
        swept.append(done)
        # a point's bytes are its size rounded down to whole blocks, as in the real sweep
        return {k: [probes.SweepPoint(bytes=s - 64, bandwidth=rate(s), measurement=m) for s in done]
                for k in ("read", "triad")}

    monkeypatch.setattr(probes, "fma_peak", lambda *a, **k: probes.PeakResult({1: 1.0, 2: 2.0}, 12, 16, (m,)))
    monkeypatch.setattr(probes, "bandwidth_sweep", bandwidth_sweep)
    monkeypatch.setattr(probes, "gemm_roof", lambda kind, threads, effort: probes.GemmResult({1: 1.0, 2: 2.0}, (m,)))
    monkeypatch.setattr(probes, "dispatch_overhead", lambda effort: (1e-6, m))
    c, _ = measure_ceilings(platform, threads=(1, 2), precisions=("fp32",), quick=False)
    full, late, *cache_looks = swept  # one cache look per kernel
    assert len(cache_looks) == 2 and all(max(look) <= 90 * MiB for look in cache_looks)
    assert c.capacity_bytes["L2"] == 2 * MiB * 2
    assert max(full) <= 1024 * MiB  # not 8 x 480 MiB
    assert late and min(late) >= 200 * MiB and set(late) <= set(full)  # the DRAM points looked at again
    assert c.bandwidth["DRAM"] == 30e9 and c.bandwidth["L3"] == 57e9
    assert 64 * MiB <= c.capacity_bytes["L3"] <= 90 * MiB
    assert c.details["nominal_capacity_bytes"]["L3"] == 480 * MiB
    assert any(w.startswith("L3: 480 MiB in sysfs, but bandwidth falls to DRAM's") for w in c.warnings)


def test_dram_is_named_as_the_stop_rule_saw_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A --quick triad sweep recorded on a 2-vCPU VM of a 260 MiB-L3 Xeon: its tail read 36.7, 10.2,
    15.2, 23.3 GB/s from 64 MiB (a slow stretch), the sweep ended at 512 MiB as DRAM's, yet the raw
    points form no DRAM plateau; DRAM must still get its ceiling."""
    from dataclasses import replace

    from rooftune.bench import Measurement, Method, Policy
    from rooftune.machine import probes
    from rooftune.machine.ceilings import measure_ceilings
    from rooftune.platform import current_platform
    from rooftune.platform.sysfs import CacheLevel

    KiB, MiB = 1024, 1024**2
    base = current_platform()
    cpus = base.usable_cpus()[:2]
    caches = (CacheLevel(1, "Data", 48 * KiB, tuple((c,) for c in cpus)),
              CacheLevel(2, "Unified", 2 * MiB, tuple((c,) for c in cpus)),
              CacheLevel(3, "Unified", 260 * MiB, (tuple(cpus),)))
    platform = replace(base, caches=caches)
    m = Measurement(label="x", samples=(1.0, 1.0, 1.0), number=1, method=Method(policy=Policy()))
    gbs = [576.5, 564.8, 576.3, 519.8, 172.7, 175.4, 171.0, 178.3, 172.9, 83.3, 50.5, 51.6, 47.8, 36.7, 10.2,
           15.2, 23.3, 24.0, 24.0, 24.0]

    def bandwidth_sweep(cpus, vector_bytes, sizes, effort, progress=None, stop=None):
        done: list[tuple[int, float]] = []
        for s in sizes:
            done.append((s, gbs[min(len(gbs) - 1, round(math.log2(s / (8 * KiB))))] * 1e9))
            if stop is not None and stop(done):
                break
        return {"triad": [probes.SweepPoint(bytes=s, bandwidth=r, measurement=m) for s, r in done]}

    monkeypatch.setattr(probes, "fma_peak", lambda *a, **k: probes.PeakResult({1: 1.0, 2: 2.0}, 12, 16, (m,)))
    monkeypatch.setattr(probes, "bandwidth_sweep", bandwidth_sweep)
    monkeypatch.setattr(probes, "gemm_roof", lambda kind, threads, effort: probes.GemmResult({1: 1.0, 2: 2.0}, (m,)))
    monkeypatch.setattr(probes, "dispatch_overhead", lambda effort: (1e-6, m))
    c, _ = measure_ceilings(platform, threads=(1, 2), precisions=("fp32",), quick=True)
    assert max(s for s, _ in c.sweep["triad"]) == 512 * MiB  # ended where the stop rule saw DRAM
    assert c.bandwidth["DRAM"] == 23.3e9  # the fastest DRAM-sized point, as the stop rule read the tail
    assert not any(w.startswith("no DRAM bandwidth") for w in c.warnings)


def test_a_kernel_still_falling_where_the_sweep_ended_gets_dram_over_the_plateau_it_ended_on() -> None:
    """The first kernel's flat tail ended the sweep; read's tail still fell there (42, 45, 40, 35,
    32, 33 GB/s from 80 MiB, steps of a third of an octave), a plateau neither raw nor as a
    never-rising envelope: it gets the median of its points over the first kernel's plateau."""
    from rooftune.machine.sweep_plan import kernel_dram

    MiB = 1024**2
    gbs = [57, 52, 52, 49, 42.5, 45.2, 39.7, 34.8, 31.7, 33.1]
    xs = [int(32 * MiB * 2 ** (i / 3)) for i in range(len(gbs))]
    ys = [g * 1e9 for g in gbs]
    dram = kernel_dram(xs, ys, start=xs[3], tail_from=xs[6], min_points=3)
    assert dram.level == "DRAM" and not dram.distinct and dram.points == 4
    assert dram.bandwidth == pytest.approx(34.0e9 - 0.05e9)  # median of 39.7, 34.8, 31.7, 33.1
    assert dram.start_bytes == xs[6] and dram.end_bytes == xs[-1]
    # a kernel whose own tail is flat over an octave is read from that tail, not from tail_from
    flat = gbs[:6] + [34.0, 33.5, 33.8, 33.1]
    dram = kernel_dram(xs, [g * 1e9 for g in flat], start=xs[3], tail_from=xs[8], min_points=3)
    assert dram.distinct and dram.start_bytes == xs[6] and dram.bandwidth == pytest.approx(33.65e9)
