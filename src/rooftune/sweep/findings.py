"""Findings in words, derived from a sweep's points.

    bounds      how many points each bound holds, and the largest point still at the dispatch
                floor (overhead-bound: its time within 2x the floor, or its work less than one
                dispatch) along each swept parameter
    crossovers  for each pair of settings that differ in one thing (bf16 against fp32, NHWC
                against NCHW, a primitive against the framework's default, cuDNN autotuning on
                against off, CUDA graphs against eager launch): along the parameter swept most, the
                value from which the second is faster at every larger value, and its speedup there
                and at the largest value; those two speedups are measured again interleaved
                (rooftune.bench.compare) when the sweep confirms them, any other is the ratio of
                the two points' medians, its interval the ratio of their intervals' far ends
    flagged     points whose interval is wider than +-5 %
    skipped     each reason a combination was skipped, once
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rooftune.units import fmt_time

if TYPE_CHECKING:
    from rooftune.sweep.base import Family
    from rooftune.sweep.plan import Skipped
    from rooftune.sweep.point import SweepPoint

#: A speedup below this is "no gain": within the spread of separate measurements of one point.
SAME = 1.03


def tied(points: list[SweepPoint], axis: str) -> frozenset[str]:
    """``axis`` and the parameters that follow it: each a function of ``axis`` over the points
    (in and out channels set together; conv2d's padding derived from the kernel)."""
    if not points:
        return frozenset({axis})
    out = set()
    for k in points[0].params:
        seen: dict[int, int] = {}
        if all(seen.setdefault(p.params[axis], p.params.get(k, -1)) == p.params.get(k, -1) for p in points):
            out.add(k)
    return frozenset(out | {axis})


def fixed(p: SweepPoint, names: frozenset[str]) -> tuple[Any, ...]:
    """The point's parameters but ``names``."""
    return tuple(sorted((k, v) for k, v in p.params.items() if k not in names))


def swept(points: list[SweepPoint]) -> list[str]:
    """The parameters that take more than one value, the one with the most values first; of
    parameters that follow another (:func:`tied`), that one."""
    values: dict[str, set[int]] = {}
    for p in points:
        for k, v in p.params.items():
            values.setdefault(k, set()).add(v)
    names = sorted((k for k, v in values.items() if len(v) > 1), key=lambda k: -len(values[k]))
    out: list[str] = []
    for k in names:
        if not any(k in tied(points, o) for o in out):
            out.append(k)
    return out


def _setting(p: SweepPoint) -> tuple[Any, ...]:
    v = p.variant
    return (p.pass_, p.precision, v.algorithm, v.layout, v.threads, v.autotune, v.launch)


#: (key of the base point, key of the other) -> the interleaved ratio base / other and its interval.
Confirmed = dict[tuple[str, str], tuple[float, float, float]]


def speedup(base: SweepPoint, other: SweepPoint, confirmed: Confirmed | None = None) -> tuple[float, float, float]:
    """base / other: > 1 when ``other`` is faster, with the interval of the ratio: the interleaved
    comparison of the two where one was made, else the ratio of their medians."""
    if confirmed and (base.key, other.key) in confirmed:
        return confirmed[(base.key, other.key)]
    assert base.median_s and other.median_s
    lo = (base.ci_low_s or base.median_s) / (other.ci_high_s or other.median_s)
    hi = (base.ci_high_s or base.median_s) / (other.ci_low_s or other.median_s)
    return base.median_s / other.median_s, lo, hi


def crossover(pairs: list[tuple[int, float]]) -> int | None:
    """The smallest value from which every ratio (value, base/other) is above 1, or None."""
    pairs = sorted(pairs)
    start = None
    for value, ratio in pairs:
        if ratio > 1.0:
            start = value if start is None else start
        else:
            start = None
    return start


def _pairs(points: list[SweepPoint], differ: Callable[[SweepPoint], Any], base: Any, other: Any,
           ) -> dict[tuple[Any, ...], tuple[SweepPoint, SweepPoint]]:
    """Points that differ only in ``differ`` (``base`` against ``other``), by everything else."""
    index: dict[tuple[Any, ...], dict[Any, SweepPoint]] = {}
    for p in points:
        rest = (tuple(sorted(p.params.items())), *[x for x in _setting_without(p, differ)])
        index.setdefault(rest, {})[differ(p)] = p
    return {k: (d[base], d[other]) for k, d in index.items() if base in d and other in d}


def _setting_without(p: SweepPoint, differ: Callable[[SweepPoint], Any]) -> tuple[Any, ...]:
    # Each differ function reads one field of the setting; the others stay in the key.
    fields = {"precision": p.precision, "algorithm": p.variant.algorithm, "layout": p.variant.layout,
              "autotune": p.variant.autotune, "launch": p.variant.launch}
    name = getattr(differ, "field", "")
    return (p.pass_, p.variant.threads, *[v for k, v in fields.items() if k != name])


def _field(name: str) -> Callable[[SweepPoint], Any]:
    def get(p: SweepPoint) -> Any:
        return p.precision if name == "precision" else getattr(p.variant, name)

    get.field = name  # type: ignore[attr-defined]
    return get


#: The comparisons the findings state: (field, base, other, words).
COMPARISONS: tuple[tuple[str, Any, Any, str], ...] = (
    ("precision", "fp32", "bf16", "bf16 over fp32"),
    ("precision", "fp32", "fp16", "fp16 over fp32"),
    ("precision", "fp32", "tf32", "TF32 over fp32"),
    ("layout", "NCHW", "NHWC", "NHWC over NCHW"),
    ("autotune", False, True, "cuDNN autotuning"),
    ("launch", "eager", "graph", "CUDA graphs over eager launch"),
)
#: Pairs compared again, interleaved, when nothing on a line of points stands out.
MAX_LOOSE_PAIRS = 4


def to_confirm(all_points: Sequence[SweepPoint]) -> list[tuple[SweepPoint, SweepPoint]]:
    """The pairs whose speedup the findings state (each crossover's first value, the value below
    it, and each line's last), to be measured again interleaved."""
    points = [p for p in all_points if p.ok]
    out: list[tuple[SweepPoint, SweepPoint]] = []
    for name, base, other, _ in COMPARISONS:
        pairs = _pairs(points, _field(name), base, other)
        params = swept([p for pair in pairs.values() for p in pair])
        if not params:
            out += list(pairs.values())[:MAX_LOOSE_PAIRS]
        for axis in params[:3]:
            series, start = _series(pairs, name, axis, None)
            if len(series) >= 2:
                values = [v for v, _, _ in series]
                # the crossover's value, the one below it (where the other setting still lost), the last
                wanted = {values[-1]} | ({start, values[max(values.index(start) - 1, 0)]} if start is not None else set())
                out += [pair for value, _, pair in series if value in wanted]
    unique: dict[tuple[str, str], tuple[SweepPoint, SweepPoint]] = {}
    for a, b in out:
        unique.setdefault((a.key, b.key), (a, b))
    return list(unique.values())


def _compare(points: list[SweepPoint], name: str, base: Any, other: Any, what: str,
             confirmed: Confirmed | None) -> list[str]:
    pairs = _pairs(points, _field(name), base, other)
    if not pairs:
        return []
    params = swept([p for pair in pairs.values() for p in pair])
    out: list[str] = []
    if not params:
        ratios = sorted(speedup(a, b, confirmed)[0] for a, b in pairs.values())
        if len(ratios) == 1:
            out.append(f"{what}: {ratios[0]:.2f}x" if ratios[0] >= SAME else f"{what}: no gain ({ratios[0]:.2f}x)")
        else:
            out.append(f"{what}: {ratios[0]:.2f}x to {ratios[-1]:.2f}x over {len(ratios)} pairs of points")
        return out
    for axis in params[:3]:
        out += _along(pairs, name, axis, what, confirmed)
    return out


Series = list[tuple[int, tuple[float, float, float], tuple["SweepPoint", "SweepPoint"]]]


def _series(pairs: dict[tuple[Any, ...], tuple[SweepPoint, SweepPoint]], name: str, axis: str,
            confirmed: Confirmed | None) -> tuple[Series, int | None]:
    """The line of pairs along ``axis`` that most values share, sorted, with each speedup, and
    the crossover's value on it."""
    groups: dict[tuple[Any, ...], Series] = {}
    together = tied([p for pair in pairs.values() for p in pair], axis)
    for (a, b) in pairs.values():
        groups.setdefault((fixed(a, together), _setting_without(a, _field(name))), []).append(
            (a.params[axis], speedup(a, b, confirmed), (a, b)))
    if not groups:
        return [], None
    series = sorted(groups[max(groups, key=lambda k: len(groups[k]))], key=lambda x: x[0])
    return series, crossover([(v, r[0]) for v, r, _ in series])


def _along(pairs: dict[tuple[Any, ...], tuple[SweepPoint, SweepPoint]], name: str, axis: str, what: str,
           confirmed: Confirmed | None) -> list[str]:
    """The crossover of one comparison along ``axis``, on the line of points most values share."""
    out: list[str] = []
    found, start = _series(pairs, name, axis, confirmed)
    series = [(v, r, pair[0]) for v, r, pair in found]
    if len(series) < 2:
        return out
    setting = f"{series[0][2].pass_}, " + (f"{series[0][2].precision}, " if name != "precision" else "") + \
        (f"{series[0][2].variant.layout}, " if name != "layout" and series[0][2].variant.layout != "-" else "")
    last_v, last_r, _ = series[-1]
    if start is None:
        best_v, best_r, _ = max(series, key=lambda x: x[1][0])
        out.append(f"{what} along {axis} ({setting.rstrip(', ')}): never faster at every larger {axis}; best "
                   f"{best_r[0]:.2f}x at {axis} {best_v}, {last_r[0]:.2f}x at {last_v}")
    elif start == series[0][0]:
        out.append(f"{what} along {axis} ({setting.rstrip(', ')}): faster at every {axis} swept, "
                   f"{series[0][1][0]:.2f}x at {start} to {last_r[0]:.2f}x ({last_r[1]:.2f}-{last_r[2]:.2f}) at {last_v}")
    else:
        at = next(r for v, r, _ in series if v == start)
        out.append(f"{what} along {axis} ({setting.rstrip(', ')}): faster only from {axis} {start} "
                   f"({at[0]:.2f}x), reaching {last_r[0]:.2f}x ({last_r[1]:.2f}-{last_r[2]:.2f}) at {last_v}")
    return out


def _overhead(family: Family, points: list[SweepPoint]) -> list[str]:
    out = []
    counts = Counter(p.bound for p in points)
    out.append("bounds: " + ", ".join(f"{n} {b}" for b, n in counts.most_common()))
    overhead = [p for p in points if p.bound == "overhead"]
    for axis in swept(points)[:3]:
        # the reference's setting (forward, fp32, the default) when swept, else the first
        for setting in sorted({_setting(p) for p in points},
                              key=lambda s: (s[0] != "fwd", s[1] != "fp32", s[2] != "default", str(s)))[:1]:
            series = sorted((p for p in points if _setting(p) == setting), key=lambda p: p.params[axis])
            groups: dict[tuple[Any, ...], list[SweepPoint]] = {}
            together = tied(points, axis)
            for p in series:
                groups.setdefault(fixed(p, together), []).append(p)
            line = max(groups.values(), key=len)
            if len(line) < 2:
                continue
            below = [p for p in line if p.bound == "overhead"]
            if below and len(below) < len(line):
                top = max(p.params[axis] for p in below)
                at = max(below, key=lambda p: p.params[axis])
                out.append(f"up to {axis} {top} the points are overhead-bound ({setting[0]}, {setting[1]}): their "
                           f"work takes the hardware less than the dispatch floor of "
                           f"{fmt_time(at.lower_bound_s or 0)}, or their time is within 2x of it "
                           f"({fmt_time(at.median_s or 0)} at {axis} {top})")
            elif below:
                out.append(f"every {axis} swept is overhead-bound ({setting[0]}, {setting[1]})")
    if overhead and len(out) == 1:
        out.append(f"{len(overhead)} points are overhead-bound, the largest "
                   f"{family.describe(max(overhead, key=lambda p: p.flops or 0).params)}")
    return out


def findings(family: Family, all_points: Sequence[SweepPoint], skipped: Sequence[Skipped],
             confirmed: Confirmed | None = None) -> list[str]:
    """The findings of a sweep's points in words (see the module docstring); ``confirmed`` holds
    the interleaved comparisons of :func:`to_confirm`'s pairs, which their figures then are."""
    points = [p for p in all_points if p.ok]
    out: list[str] = []
    if points:
        out += _overhead(family, points)
        for name, base, other, what in COMPARISONS:
            out += _compare(points, name, base, other, what, confirmed)
        for algo in sorted({p.variant.algorithm for p in points} - {"default"}):
            if points[0].family == "conv2d" and not algo.startswith("int8"):
                pairs = _pairs(points, _field("algorithm"), "default", algo)
                if pairs:
                    wins = [speedup(a, b) for a, b in pairs.values()]
                    better = [w for w in wins if w[0] >= SAME]
                    out.append(f"{algo} over the framework default: faster on {len(better)} of {len(wins)} points"
                               + (f", best {max(better)[0]:.2f}x" if better else ""))
        if confirmed:
            out.append(f"{len(confirmed)} of the speedups stated (each crossover's first value and each "
                       "line's last) were measured again interleaved (rooftune.bench.compare), the others are "
                       "ratios of separately timed medians")
        flagged = [p for p in points if p.flagged]
        if flagged:
            out.append(f"{len(flagged)} of {len(points)} points flagged: confidence interval wider than +-5 % "
                       "or the harness warned (a busy host); run the sweep again on a quiet machine to confirm them")
    failed = [p for p in all_points if not p.ok]
    if failed:
        out.append(f"{len(failed)} points failed: " + "; ".join(sorted({p.reason for p in failed}))[:300])
    for reason in sorted({s.reason for s in skipped}):
        n = sum(1 for s in skipped if s.reason == reason)
        out.append(f"skipped {n}: {reason}")
    return out
