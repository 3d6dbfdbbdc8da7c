"""Figures of a kernel-family sweep (rooftune.sweep), each written as PNG and SVG:

    time_flops   the time-based roofline: time against FLOPs, a line T = F / P for each roof the
                 points ran on and the dispatch floor
    time_bytes   time against the bytes moved, a line T = B / BW for each memory level and the floor
    attained     attained FLOP/s against each swept parameter, one line per pass, precision and
                 variant (the other parameters at the values most points share)
    speedup      each setting's speedup over the fp32 framework default in the first layout, along
                 the parameter swept most
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.fileio import atomic_path

if TYPE_CHECKING:
    from rooftune.sweep import SweepPoint, SweepResult

_PRECISION_MARKERS = {"fp32": "o", "tf32": "D", "bf16": "s", "fp16": "^", "int8": "v"}
_LEVEL_COLOURS = {"L1": "#1b9e77", "L2": "#d95f02", "L3": "#7570b3", "DRAM": "#e7298a"}


def _figure(width: float = 8, height: float = 5.5, ncols: int = 1) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=(width, height), dpi=110, squeeze=False)


def _setting(p: SweepPoint) -> str:
    return f"{p.pass_} {p.precision} {p.variant.label()}"


def _save(fig: Any, directory: Path, name: str) -> list[Path]:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    paths = []
    try:
        for suffix in (".png", ".svg"):
            path = directory / f"{name}{suffix}"
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format=suffix[1:])
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


def _time_lines(ax: Any, xs: list[float], rates: dict[str, float], floor: float, unit: str,
                colour: Callable[[str], str | None]) -> None:
    lo, hi = min(xs) / 2, max(xs) * 2
    for name, rate in rates.items():
        if rate > 0:
            ax.plot([lo, hi], [lo / rate, hi / rate], "--", lw=1, color=colour(name), label=f"{name}: T = {unit}/{name}")
    if floor > 0:
        ax.axhline(floor, color="grey", lw=1, ls=":", label="dispatch floor")


def _time_rates(result: SweepResult, attr: str, points: list[SweepPoint]) -> dict[str, float]:
    """The roofs of a time figure: the peaks the points ran on (FLOPs), or every memory level's
    bandwidth (bytes)."""
    if attr == "flops":
        used = {p.roof_name for p in points}
        return {k: v for k, v in result.roofs.get("peak", {}).items() if k in used}
    return dict(result.roofs.get("bandwidth", {}))


#: Each time figure by the point's attribute on its x axis: the file's name, the roof lines' unit
#: (T = F/P or T = B/BW), the colour of a roof's line, the axis label and the title's words.
_TIME_FIGURES: dict[str, tuple[str, str, Callable[[str], str | None], str, str]] = {
    "flops": ("time_flops", "F", lambda _: None, "FLOPs per call", "FLOPs"),
    "traffic": ("time_bytes", "B", _LEVEL_COLOURS.get, "bytes moved per call", "bytes, per memory level"),
}


def plot_time(result: SweepResult, directory: Path, attr: str) -> list[Path]:
    """The time-based roofline over the points' ``attr`` (``flops`` or ``traffic``): each point's
    time per call, and a line T = x / roof for each roof and the dispatch floor."""
    name, unit, colour, xlabel, what = _TIME_FIGURES[attr]
    points = [p for p in result.ok_points if getattr(p, attr)]
    fig, axes = _figure()
    ax = axes[0][0]
    for precision in sorted({p.precision for p in points}):
        sel = [p for p in points if p.precision == precision]
        ax.scatter([getattr(p, attr) for p in sel], [p.median_s for p in sel], s=14, label=precision,
                   marker=_PRECISION_MARKERS.get(precision, "o"))
    if points:
        _time_lines(ax, [float(getattr(p, attr) or 1) for p in points], _time_rates(result, attr, points),
                    float(result.roofs.get("dispatch_s", 0)), unit, colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time per call (s)")
    ax.set_title(f"{result.family}: time-based roofline ({what})")
    ax.legend(fontsize=7)
    return _save(fig, directory, name)


def _line(points: list[SweepPoint], axis: str) -> list[SweepPoint]:
    """The points along ``axis`` whose other parameters are the values most points share."""
    from collections import Counter

    from rooftune.sweep.findings import fixed, tied

    together = tied(points, axis)
    rest = Counter(fixed(p, together) for p in points)
    if not rest:
        return []
    common = rest.most_common(1)[0][0]
    return [p for p in points if fixed(p, together) == common]


def plot_attained(result: SweepResult, directory: Path) -> list[Path]:
    from rooftune.sweep.findings import swept

    points = result.ok_points
    axes_names = swept(points) or ["batch"]
    fig, axes = _figure(width=5 * len(axes_names), height=4.5, ncols=len(axes_names))
    for ax, axis in zip(axes[0], axes_names, strict=True):
        line = _line(points, axis)
        for setting in sorted({_setting(p) for p in line}):
            sel = sorted((p for p in line if _setting(p) == setting), key=lambda p: p.params[axis])
            ax.plot([p.params[axis] for p in sel], [p.attained_flops for p in sel], marker="o", ms=3, label=setting)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(axis)
        ax.set_ylabel("attained FLOP/s")
        ax.legend(fontsize=6)
    fig.suptitle(f"{result.family}: attained FLOP/s per swept parameter")
    return _save(fig, directory, "attained")


def speedups(result: SweepResult) -> dict[str, list[tuple[SweepPoint, float]]]:
    """Each setting's points with their speedup over the reference of the same parameters, pass and
    threads (fp32, framework default, the first layout, eager launch)."""
    ref: dict[tuple[Any, ...], SweepPoint] = {}
    points = result.ok_points
    for p in points:
        if p.error is None:
            ref[(tuple(sorted(p.params.items())), p.pass_, p.variant.threads)] = p
    out: dict[str, list[tuple[SweepPoint, float]]] = {}
    for p in points:
        base = ref.get((tuple(sorted(p.params.items())), p.pass_, p.variant.threads))
        if p.error is None or base is None or not p.median_s or not base.median_s:
            continue
        out.setdefault(_setting(p), []).append((p, base.median_s / p.median_s))
    return out


def plot_speedup(result: SweepResult, directory: Path) -> list[Path]:
    from rooftune.sweep.findings import swept

    points = result.ok_points
    axis = (swept(points) or ["batch"])[0]
    line = {id(p) for p in _line(points, axis)}
    fig, axes = _figure()
    ax = axes[0][0]
    for setting, pairs in sorted(speedups(result).items()):
        sel = sorted(((p, s) for p, s in pairs if id(p) in line), key=lambda x: x[0].params[axis])
        if sel:
            ax.plot([p.params[axis] for p, _ in sel], [s for _, s in sel], marker="o", ms=3, label=setting)
    ax.axhline(1.0, color="grey", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")  # a ratio: 2x faster and 2x slower lie equally far from 1
    ax.set_xlabel(axis)
    ax.set_ylabel("speedup over fp32 framework default")
    ax.set_title(f"{result.family}: speedup of each variant")
    ax.legend(fontsize=6)
    return _save(fig, directory, "speedup")


def plot_sweep_result(result: SweepResult, directory: str | Path) -> dict[str, list[Path]]:
    """Every figure of the sweep into ``directory`` (created), by name."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    return {"time_flops": plot_time(result, d, "flops"), "time_bytes": plot_time(result, d, "traffic"),
            "attained": plot_attained(result, d), "speedup": plot_speedup(result, d)}
