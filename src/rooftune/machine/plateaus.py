"""Finding bandwidth plateaus in a working-set sweep and naming them after the cache levels.

Detection follows the Empirical Roofline Toolkit: walk the sweep from small to large working sets,
group consecutive points whose bandwidth stays within a tolerance of the group's median, drop
groups too short to be a level (the transitions between caches), and treat two neighbouring groups
as one level unless the later one is at least 1.25x slower. Naming uses only the cache sizes:
a plateau belongs to the level whose capacity range holds its (geometric) middle, and a level's
ceiling is its fastest plateau past the transition from the level before. DRAM, the last level, is
the plateau a sweep ends on once it is flat (:func:`dram_tail`, :func:`dram_confirmed`): past it
there is no slower level whose plateau would show where DRAM's ends.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: A point joins the current group while within +-12 % of the group's median. ERT bins at +-5 % on
#: quiet HPC nodes; shared VMs jitter more, and neighbouring levels differ by >= 1.25x anyway.
PLATEAU_TOLERANCE = 0.12
#: ERT's rule: a new level only if it is at least 1.25x lower than the previous one.
LEVEL_STEP = 1.25
#: Fewest points a group needs to be a plateau rather than a transition.
MIN_PLATEAU_POINTS = 2

LEVELS = ("L1", "L2", "L3", "DRAM")


@dataclass(frozen=True)
class Plateau:
    """A run of sweep points with about the same bandwidth."""

    start_bytes: int
    end_bytes: int
    bandwidth: float  # bytes/s, median of its points
    points: int
    level: str | None = None
    distinct: bool = True  # False: no plateau was found, the value is the median of the level's points
    #: The runs of agreeing points it was merged from: (start_bytes, end_bytes, median bandwidth).
    groups: tuple[tuple[int, int, float], ...] = ()

    @property
    def middle_bytes(self) -> float:
        return math.sqrt(self.start_bytes * self.end_bytes)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Plateau:
        groups = tuple((int(a), int(b), float(bw)) for a, b, bw in d.get("groups", ()))  # type: ignore[attr-defined]
        return cls(**{**d, "groups": groups})  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        return {
            "start_bytes": self.start_bytes,
            "end_bytes": self.end_bytes,
            "bandwidth": self.bandwidth,
            "points": self.points,
            "level": self.level,
            "distinct": self.distinct,
            "groups": [list(g) for g in self.groups],
        }


def _plateau(points: Sequence[tuple[int, float]],
             groups: Sequence[Sequence[tuple[int, float]]] = ()) -> Plateau:
    """A plateau over ``points`` (bandwidth: their median), remembering the groups it was merged from."""
    return Plateau(
        start_bytes=points[0][0],
        end_bytes=points[-1][0],
        bandwidth=statistics.median(r for _, r in points),
        points=len(points),
        groups=tuple((g[0][0], g[-1][0], statistics.median(r for _, r in g)) for g in groups),
    )


def detect_plateaus(
    sizes: Sequence[int],
    rates: Sequence[float],
    *,
    tolerance: float = PLATEAU_TOLERANCE,
    min_points: int = MIN_PLATEAU_POINTS,
    level_step: float = LEVEL_STEP,
) -> list[Plateau]:
    """Plateaus of a sweep (sizes ascending), largest working sets last."""
    pts = sorted(zip(sizes, rates, strict=True))
    groups: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for p in pts:
        if current:
            ref = statistics.median(r for _, r in current)
            if abs(p[1] / ref - 1.0) > tolerance:
                groups.append(current)
                current = []
        current.append(p)
    if current:
        groups.append(current)
    kept = [g for g in groups if len(g) >= min_points]
    merged: list[list[list[tuple[int, float]]]] = []  # each plateau as the groups it was merged from
    for g in kept:
        if merged:
            prev = statistics.median(r for g0 in merged[-1] for _, r in g0)
            here = statistics.median(r for _, r in g)
            if max(prev, here) / min(prev, here) < level_step:
                merged[-1].append(g)
                continue
        merged.append([g])
    return [_plateau([p for g in gs for p in g], gs) for gs in merged]


#: DRAM begins at twice the last cache: between 1x and 2x a large share of the working set still
#: hits the cache (and on a shared host the L3 others leave free varies), so those points are a
#: transition, not DRAM (named DRAM, they read far above it: BENCHMARKS.md, "Ceilings against
#: likwid-bench", run C).
DRAM_MIN_FACTOR = 2.0


#: A working set must exceed the previous level's capacity by this factor before that level's
#: data is gone from it (below, part of each pass still hits the faster level).
TRANSITION_FACTOR = 1.5


def _previous_capacities(capacities: dict[str, int]) -> dict[str, float]:
    """Each level's previous cache capacity (none for L1; the last cache for DRAM)."""
    out: dict[str, float] = {}
    last = 0.0
    for name in LEVELS:
        out[name] = last
        if name in capacities:
            last = float(capacities[name])
    return out


def level_ranges(capacities: dict[str, int],
                 dram_factor: float = DRAM_MIN_FACTOR) -> dict[str, tuple[float, float]]:
    """Working-set range (lo, hi] of each level from the cache capacities available to the team;
    DRAM starts at ``dram_factor`` times the last cache (the gap is a transition)."""
    ranges: dict[str, tuple[float, float]] = {}
    lo = 0.0
    for name in LEVELS[:-1]:
        cap = capacities.get(name)
        if cap is None:
            continue
        ranges[name] = (lo, float(cap))
        lo = float(cap)
    ranges["DRAM"] = (lo * dram_factor, math.inf)
    return ranges


def name_plateaus(
    plateaus: Sequence[Plateau],
    capacities: dict[str, int],
    sizes: Sequence[int] = (),
    rates: Sequence[float] = (),
) -> dict[str, Plateau]:
    """Assign plateaus to levels: each level takes the fastest plateau past the transition from
    the level before. A level that got none falls back to the median of the sweep points well
    inside its range (marked ``distinct=False``); a level with no points there is left out."""
    ranges = level_ranges(capacities)
    previous = _previous_capacities(capacities)
    named: dict[str, Plateau] = {}
    rank: dict[str, tuple[int, float, float]] = {}
    for p in plateaus:
        for name, (lo, hi) in ranges.items():
            if lo < p.middle_bytes <= hi:
                # Past the transition from the level before, the fastest plateau is the level's
                # ceiling (interference only slows, and in L2 a larger working set per core trains
                # the prefetchers, so the upper half of L2 reads faster than the lower, as
                # likwid-bench does: BENCHMARKS.md, "Ceilings against likwid-bench", run D); a
                # plateau that lies in the transition only counts when no other does, and then the
                # longest one.
                edge = TRANSITION_FACTOR * previous.get(name, 0.0)
                # A plateau merged from groups (within ERT's 1.25x of each other) is as fast as its
                # fastest group whose (geometric) middle lies in this level's range, past the
                # transition (a group's median is not moved by its first point or two).
                fits = [g_bw for a, b, g_bw in p.groups if max(edge, lo) < math.sqrt(a * b) <= hi]
                bw = max(fits) if fits else p.bandwidth
                # A plateau counts as past the transition when it starts there or when a group of
                # it lies there: a level's plateau can start just inside the edge, and a DRAM
                # plateau that follows inside a nominal L3 must not take that level's name for
                # starting later (BENCHMARKS.md, "Ceilings against likwid-bench", run I).
                past = p.start_bytes > edge or bool(fits)
                key = (1, bw, p.points) if past else (0, p.points, bw)
                if name not in rank or key > rank[name]:
                    rank[name] = key
                    named[name] = Plateau(p.start_bytes, p.end_bytes, bw, p.points, level=name,
                                          groups=p.groups)
                break
    dram = dram_below_nominal(plateaus, capacities, named)
    if dram is not None:
        named["DRAM"] = dram
    for name, (lo, hi) in ranges.items():
        if name in named:
            continue
        # "Well inside": past 1.5x the previous level (its data is gone) and below half of this
        # level's capacity (no conflict misses yet).
        inside = [
            (s, r) for s, r in zip(sizes, rates, strict=True)
            if lo * TRANSITION_FACTOR < s <= (hi * 0.5 if hi != math.inf else s)
        ]
        if inside:
            p = _plateau(inside)
            named[name] = Plateau(
                p.start_bytes, p.end_bytes, p.bandwidth, p.points, level=name, distinct=False
            )
    return {name: named[name] for name in ranges if name in named}


#: A sweep in progress may end once its DRAM plateau spans two octaves of working sets; shorter,
#: it may still be the tail of a cache. Naming asks one octave of every kernel's sweep (the sweep
#: ended where the first kernel's DRAM plateau spanned two; another kernel's fall may come later).
DRAM_SPAN = 4.0
DRAM_SPAN_NAMED = 2.0


def last_cache(capacities: dict[str, int]) -> str | None:
    caches = [lv for lv in LEVELS[:-1] if lv in capacities]
    return caches[-1] if caches else None


def dram_below_nominal(plateaus: Sequence[Plateau], capacities: dict[str, int],
                       named: dict[str, Plateau]) -> Plateau | None:
    """The DRAM plateau when it starts below twice the nominal last cache, else None.

    A last-level cache shared by a whole socket holds far less for a few cores of a VM than its
    sysfs size says (other tenants fill it, or it is split into sub-NUMA clusters), so bandwidth
    can reach DRAM's well inside the nominal capacity (BENCHMARKS.md, "Ceilings against
    likwid-bench", run G). The sweep's last plateau is DRAM when it comes after the last cache's
    plateau, is at least :data:`LEVEL_STEP` slower and spans :data:`DRAM_SPAN_NAMED`.
    """
    last = last_cache(capacities)
    if last is None or last not in named or not named[last].distinct or not plateaus:
        return None
    cache, tail = named[last], plateaus[-1]
    if (tail.start_bytes > cache.end_bytes and tail.bandwidth * LEVEL_STEP <= cache.bandwidth
            and tail.end_bytes >= DRAM_SPAN_NAMED * tail.start_bytes):
        return Plateau(tail.start_bytes, tail.end_bytes, tail.bandwidth, tail.points, level="DRAM",
                       groups=tail.groups)
    return None


def never_rising(rates: Sequence[float]) -> list[float]:
    """Each rate of a sweep raised to the fastest rate at any larger working set. Interference
    only ever slows, and a larger working set is never faster: a point is at least as fast as any
    point after it."""
    return list(itertools.accumulate(reversed(rates), max))[::-1]


def dram_reached(points: Sequence[tuple[int, float]], capacities: dict[str, int], min_points: int,
                 min_bytes: int) -> int | None:
    """Where the DRAM plateau of a sweep in progress starts, once the sweep has seen every cache
    level and a DRAM plateau after them (see :func:`dram_below_nominal`); None before. The sweep
    can end there."""
    return _reached(points, capacities, min_points, min_bytes)[0]


def _reached(points: Sequence[tuple[int, float]], capacities: dict[str, int], min_points: int,
             min_bytes: int) -> tuple[int | None, dict[str, Plateau]]:
    """:func:`dram_reached`'s answer with the plateaus it named, which :func:`dram_confirmed`
    reads next."""
    if not points or points[-1][0] < min_bytes:
        return None, {}
    sizes = [s for s, _ in points]
    # One slowed point would otherwise split the last cache's plateau or the DRAM tail, and the
    # sweep would run on to its end.
    rates = never_rising([r for _, r in points])
    points = list(zip(sizes, rates, strict=True))
    found = detect_plateaus(sizes, rates, min_points=min_points)
    named = name_plateaus(found, capacities, sizes, rates)
    if any(lv not in named or not named[lv].distinct for lv in LEVELS[:-1] if lv in capacities):
        return None, named
    dram = named.get("DRAM")
    if dram is not None and dram.distinct and dram.end_bytes >= DRAM_SPAN * dram.start_bytes:
        return dram.start_bytes, named
    return _slow_tail(points, named, capacities, min_points), named


def _slow_tail(points: Sequence[tuple[int, float]], named: dict[str, Plateau], capacities: dict[str, int],
               min_points: int) -> int | None:
    """Start of the sweep's tail past the last cache's plateau when all of it lies within
    :data:`LEVEL_STEP` (one level), spans :data:`DRAM_SPAN` and is a level slower than that cache.
    ``points``' rates never rise with the working set (see :func:`dram_reached`).

    Plateau detection splits a DRAM tail whose points jitter by more than its tolerance (as on a
    shared VM): the sweep would go on to its end, seconds of first touch and passes over GiBs, for
    nothing it does not already know.
    """
    last = last_cache(capacities)
    cache = named.get(last) if last else None
    if cache is None or not cache.distinct:
        return None
    tail = [p for p in points if p[0] > cache.end_bytes]
    # Rates fall along the tail, so the run within one level step ends at the last point.
    run = [p for p in tail if p[1] < LEVEL_STEP * tail[-1][1]] if tail else []
    if len(run) < min_points or run[-1][0] < DRAM_SPAN * run[0][0]:
        return None
    if statistics.median(r for _, r in run) * LEVEL_STEP > cache.bandwidth:
        return None
    return run[0][0]


#: DRAM's plateau is confirmed only this far past the last cache the cores see (the effective
#: capacity of :func:`seen_capacity`): from 2x it (:data:`DRAM_MIN_FACTOR`) a shared or partly
#: inclusive cache still serves some of each pass, and the curve can keep falling for an octave
#: more; at 4x less than a quarter of the working set fits in it.
DRAM_CONFIRM_FACTOR = 4.0
#: The tail of a sweep is flat once its last octave of working sets agrees within
#: :data:`PLATEAU_TOLERANCE`: a curve that falls more than that over an octave is not at its level.
FLAT_SPAN = 2.0


def seen_capacity(capacities: dict[str, int], named: dict[str, Plateau], dram_start: int) -> int:
    """The last cache's capacity as the cores see it: its sysfs size, except where bandwidth fell to
    DRAM's below twice that size (a socket-wide cache shared with other cores or tenants, see
    :func:`dram_below_nominal`): then where the cache's plateau ended, which is all it held here."""
    last = last_cache(capacities)
    if last is None:
        return 0
    nominal = capacities[last]
    cache = named.get(last)
    if cache is not None and cache.distinct and dram_start < DRAM_MIN_FACTOR * nominal:
        return min(nominal, cache.end_bytes)
    return nominal


def dram_tail(sizes: Sequence[int], rates: Sequence[float], *, min_points: int = MIN_PLATEAU_POINTS,
              from_bytes: int = 0, tolerance: float = PLATEAU_TOLERANCE) -> Plateau | None:
    """The plateau a sweep ends on, once it is flat; None while the curve still falls.

    The plateau is the run of last points (from ``from_bytes`` on) whose rate, each raised to the
    fastest rate at any larger working set (:func:`never_rising`: a point slowed by interference
    does not cut the run), lies within ``tolerance`` of the last point's. It is flat when it spans
    :data:`FLAT_SPAN` (an octave) and ``min_points`` points.

    Its bandwidth is the statistic of every level (:func:`detect_plateaus`): the median of the
    points that agree within ``tolerance``, each point being the fastest sample of its looks. The
    fastest sample, because interference only slows a kernel (a ceiling is an upper bound); a point
    slowed further is left out, as a lone slowed point is left out of a cache's plateau; the median
    over the plateau, because a single point can still run fast for a reason of the moment (on a
    VM, its share of a socket-wide L3 grows while the other tenants are quiet), and the best point
    of a region still falling would read a level that is not there.
    """
    pts = [(s, r) for s, r in zip(sizes, rates, strict=True) if s >= from_bytes]
    if not pts:
        return None
    envelope = never_rising([r for _, r in pts])
    last = envelope[-1]
    # the envelope never rises, so the points within tolerance of the last one are a trailing run
    run = [p for p, e in zip(pts, envelope, strict=True) if e <= (1 + tolerance) * last]
    if len(run) < min_points or run[-1][0] < FLAT_SPAN * run[0][0]:
        return None
    agree = [r for _, r in run if r >= (1 - tolerance) * last]
    bw = statistics.median(agree)
    return Plateau(run[0][0], run[-1][0], bw, len(agree), level="DRAM", groups=((run[0][0], run[-1][0], bw),))


@dataclass(frozen=True)
class SweepEnd:
    """A stop rule's answer that the sweep ends at the point it was asked about.

    ``dram_from`` is the working set where the DRAM plateau that ended it starts; None when the
    sweep ended without DRAM seen (its planned end reached on a flat curve)."""

    dram_from: int | None


def dram_confirmed(points: Sequence[tuple[int, float]], capacities: dict[str, int], min_points: int,
                   min_bytes: int) -> tuple[int, Plateau] | None:
    """Where DRAM starts in a sweep in progress once its plateau is confirmed, with the flat tail
    that confirmed it; None before.

    Confirmed means: the sweep has seen every cache level and DRAM after them
    (:func:`dram_reached`), has gone :data:`DRAM_CONFIRM_FACTOR` past the last cache the cores see
    (:func:`seen_capacity`), and its last octave is flat (:func:`dram_tail`). A sweep that ends
    earlier ends on a curve still falling, and its "DRAM" is part cache.
    """
    start, named = _reached(points, capacities, min_points, min_bytes)
    if start is None:
        return None
    sizes = [s for s, _ in points]
    if sizes[-1] < DRAM_CONFIRM_FACTOR * seen_capacity(capacities, named, start):
        return None
    tail = dram_tail(sizes, [r for _, r in points], min_points=min_points, from_bytes=start)
    return None if tail is None else (start, tail)


def sweep_sizes(max_bytes: int, steps_per_octave: int, min_bytes: int = 4096) -> list[int]:
    """Geometric working-set sizes from ``min_bytes`` to ``max_bytes`` inclusive."""
    octaves = math.log2(max_bytes / min_bytes)
    n = max(1, math.ceil(octaves * steps_per_octave))
    return sorted({int(round(min_bytes * 2 ** (i / steps_per_octave))) for i in range(n + 1)})


def level_warnings(kind: str, named: dict[str, Plateau]) -> list[str]:
    """A warning for each level of one kernel's sweep that no distinct plateau named."""
    return [f"{kind}: no distinct {lvl} plateau in the sweep; {lvl} bandwidth is the median of the "
            f"{p.points} points inside its capacity range" for lvl, p in named.items() if not p.distinct]
