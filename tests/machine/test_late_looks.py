"""A full run's second looks: which sweep points are measured again, and how the looks merge."""

from __future__ import annotations

from rooftune.bench import Measurement, Method, Policy
from rooftune.machine.probes import SweepPoint
from rooftune.machine.sweep_plan import LATE_POINTS_PER_LEVEL, cache_peaks, merge_best
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


def test_a_run_below_an_earlier_one_on_the_same_platform_says_so(tmp_path, monkeypatch) -> None:
    """No steal time, yet L1 at half and fp32 a fifth below the last run: the warning names them."""
    from dataclasses import replace

    from rooftune.machine import ceilings as ceilings_mod
    from rooftune.platform import current_platform
    from rooftune.store import Store
    from tests.conftest import make_ceilings

    platform = current_platform()
    earlier = make_ceilings(platform)
    db = tmp_path / "c.db"
    with Store(db) as s:
        s.save_ceilings(platform, earlier.to_dict(), quick=False, threads=earlier.threads)
        # a quick run is another effort: never compared with a full one
        s.save_ceilings(platform, replace(earlier, bandwidth={**earlier.bandwidth, "L1": 9e12}).to_dict(),
                        quick=True, threads=earlier.threads)
    slow = replace(earlier, peak_flops={**earlier.peak_flops, "fp32": 0.8 * earlier.peak_flops["fp32"]},
                   bandwidth={**earlier.bandwidth, "L1": 0.5 * earlier.bandwidth["L1"], "L2": 0.95 * earlier.bandwidth["L2"]})
    monkeypatch.setattr(ceilings_mod, "measure_ceilings", lambda *a, **k: (slow, []))
    c = ceilings_mod.get_ceilings(threads=list(earlier.threads), refresh=True, db=str(db), platform=platform)
    assert c.details["below_earlier_runs"] == {"fp32": 0.8, "L1": 0.5}  # L2, 5 % below, is within the margin
    [warning] = [w for w in c.warnings if w.startswith("below the best of 1 earlier run")]
    assert "fp32 -20%" in warning and "L1 -50%" in warning and "L2" not in warning
    with Store(db) as s:  # stored with its warning
        stored = s.load_ceilings(platform.id, threads=earlier.threads, allow_quick=False)
    assert stored is not None and warning in stored["warnings"]
    # the same figures again: nothing to say
    monkeypatch.setattr(ceilings_mod, "measure_ceilings", lambda *a, **k: (earlier, []))
    c = ceilings_mod.get_ceilings(threads=list(earlier.threads), refresh=True, db=str(db), platform=platform)
    assert "below_earlier_runs" not in c.details and not any(w.startswith("below the best") for w in c.warnings)
