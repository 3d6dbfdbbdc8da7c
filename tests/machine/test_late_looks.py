"""A full run's second looks: which sweep points are measured again, and how the looks merge."""

from __future__ import annotations

from rooftune.bench import Measurement, Method, Policy
from rooftune.machine.ceilings import LATE_POINTS_PER_LEVEL, cache_peaks, merge_best
from rooftune.machine.probes import SweepPoint
from tests.machine.test_plateaus import CAPS, KiB, MiB, synthetic_sweep


def point(size: int, rate: float, label: str = "sweep") -> SweepPoint:
    m = Measurement(label=label, samples=(size / rate,), number=1, method=Method(policy=Policy()))
    return SweepPoint(bytes=size, bandwidth=rate, measurement=m)


def test_the_fastest_points_of_each_cache_plateau_are_looked_at_again() -> None:
    sizes, rates = synthetic_sweep()
    # one point of each level slowed by another tenant: a second look is for what a level may read
    rates = list(rates)
    for i, s in enumerate(sizes):
        if s in (16 * KiB, 512 * KiB, 8 * MiB):
            rates[i] *= 0.7
    points = [point(s, r) for s, r in zip(sizes, rates, strict=True)]
    chosen = cache_peaks(points, CAPS, min_points=2)
    by_level = {"L1": (4 * KiB, 64 * KiB), "L2": (160 * KiB, 1.5 * MiB), "L3": (3.5 * MiB, 24 * MiB)}
    for level, (lo, hi) in by_level.items():
        inside = [i for i in chosen if lo <= sizes[i] <= hi]
        assert len(inside) == LATE_POINTS_PER_LEVEL, level
        # the level's fastest points, never a slowed one
        assert all(rates[i] == max(rates[j] for j in range(len(sizes)) if lo <= sizes[j] <= hi) for i in inside)
    assert all(sizes[i] <= 24 * MiB for i in chosen)  # nothing from DRAM: it has its own late pass


def test_merge_keeps_the_faster_look_and_returns_the_slower() -> None:
    sweep = {"triad": [point(1024, 100e9), point(2048, 80e9), point(4096, 60e9)]}
    again = {"triad": [point(2048, 90e9, "again"), point(4096, 50e9, "again")]}
    slower = merge_best(sweep, again)
    assert [p.bandwidth for p in sweep["triad"]] == [100e9, 90e9, 60e9]
    assert sweep["triad"][1].measurement.label == "again"
    # the looks that lost: the first 2048 B one and the second 4096 B one
    assert [m.label for m in slower] == ["sweep", "again"]
    assert merge_best(sweep, {"triad": [point(999, 1e12)]}) != [] and max(p.bandwidth for p in sweep["triad"]) == 100e9
