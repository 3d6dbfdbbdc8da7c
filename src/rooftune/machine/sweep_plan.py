"""The CPU's bandwidth sweep: its plan (the working sets, up to what memory allows), its end rule
(:class:`SweepStop`), DRAM read from the flat tail it ended on, and the points a full run looks at
again."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rooftune.machine.plateaus import (
    Plateau,
    SweepEnd,
    dram_confirmed,
    dram_tail,
    last_cache,
    sweep_sizes,
)
from rooftune.machine.roofline import SWEEP_ARRAYS_FACTOR, named_levels

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
#: The sweep's arrays (:data:`rooftune.machine.roofline.SWEEP_ARRAYS_FACTOR` times the largest
#: working set) take at most this share of the memory available, so a small VM on a socket with a
#: huge L3 is not pushed into swap.
SWEEP_MEMORY_SHARE = 0.5


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
    # start-up is what gets timed (BENCHMARKS.md, "The ceilings on a 16-core machine").
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
        confirmed = dram_confirmed(points, self.capacities, self.min_points, MIN_SWEEP_BYTES)
        if confirmed is not None:
            start, tail = confirmed
        elif points[-1][0] < self.plan.planned_bytes:
            return None
        else:
            start = None
            tail = dram_tail([s for s, _ in points], [r for _, r in points], min_points=self.min_points)
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
    named = named_levels(xs, ys, capacities, min_points)
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
