"""Figures of a model analysis: ops on the roofline, the time-based roofline, trajectories."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.fileio import save_figure as _save
from rooftune.report.figures import LEVEL_COLOURS, check_figure_format, label_roofs, new_figure
from rooftune.units import fmt_rate, threads_of

if TYPE_CHECKING:
    from rooftune.analysis import Analysis

KIND_COLOURS = {
    "conv": "#1f77b4", "linear": "#ff7f0e", "matmul": "#d62728", "attention": "#9467bd", "rnn": "#8c564b",
    "norm": "#2ca02c", "elementwise": "#e377c2", "pool": "#17becf", "softmax": "#bcbd22",
    "concat": "#7f7f7f", "copy": "#aaaaaa", "embedding": "#393b79", "reduction": "#637939",
    "view": "#cccccc", "fill": "#dddddd", "unknown": "#000000",
}
#: Marker area of an op taking the whole end-to-end time (points^2).
FULL_AREA = 2500.0


def _roof_lines(ax: Any, roofs: dict[str, Any], peak: float, alpha: float = 1.0, label: bool = True) -> None:
    import numpy as np

    ai = np.logspace(-3, 4, 300)
    for level, bw in roofs["bandwidth"].items():
        ax.plot(ai, np.minimum(bw * ai, peak), color=LEVEL_COLOURS.get(level, "grey"), lw=1.5, alpha=alpha,
                label=f"{level} {fmt_rate(bw, 'B/s')}" if label else None)
    ax.axhline(peak, color="black", lw=1.2, alpha=alpha)


def _peak(roofs: dict[str, Any]) -> float:
    peaks = roofs["peak_flops"]
    return float(peaks.get("fp32") or max(peaks.values(), default=1e9))


def _where(a: Analysis) -> str:
    """"cuda:0 NVIDIA H200" for a model run on a device, else "2 threads"."""
    return a.device if a.device != "cpu" else threads_of(a.threads)


def _used_roofs(a: Analysis) -> list[tuple[str, float]]:
    """The compute roofs the ops were placed under, highest first (fp32's where none was)."""
    peaks = a.roofs["peak_flops"]
    used = {o.roof_name for o in a.ops if o.flops and peaks.get(o.roof_name)}
    return sorted(((n, float(peaks[n])) for n in used), key=lambda kv: -kv[1]) or [("fp32", _peak(a.roofs))]


def plot_ops_roofline(a: Analysis, path: str | Path) -> Path:
    """Every op with FLOPs as a dot: x = arithmetic intensity, y = attained FLOP/s, area = share of
    time, colour = op kind; the measured roofs of this thread count (or device) behind them, every
    compute roof an op was placed under (a device's matrix roof above its vector peak)."""
    fig, ax = new_figure()
    used = _used_roofs(a)
    peak = used[0][1]
    _roof_lines(ax, a.roofs, peak)
    for _name, value in used[1:]:
        ax.axhline(value, color="black", lw=1.0, ls="--")
    label_roofs(ax, [(f"{name} {fmt_rate(value, 'FLOP/s')}" + ("" if a.device != "cpu" else f" ({_where(a)})"), value)
                     for name, value in used], 1e-2, 1e4)
    seen: set[str] = set()
    for o in a.ops:
        if not o.flops or not o.moved_bytes or o.time_s <= 0:
            continue
        share = o.time_s / a.end_to_end_s
        ax.scatter(o.flops / o.moved_bytes, o.flops / o.time_s, s=max(FULL_AREA * share, 6), alpha=0.6,
                   color=KIND_COLOURS.get(o.kind, "black"), edgecolors="none",
                   label=o.kind if o.kind not in seen else None)
        seen.add(o.kind)
    total_ai = a.flops / a.bytes if a.bytes else 1.0
    ax.scatter([total_ai], [a.flops / a.end_to_end_s], marker="*", s=220, color="gold", edgecolors="black", zorder=5,
               label="whole model")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1e-2, 1e4)
    ax.set_ylim(min(a.roofs["bandwidth"].values(), default=1e9) * 1e-3, peak * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("attained performance (FLOP/s)")
    ax.set_title(f"{a.model}, batch {a.batch}, {_where(a)}: ops on the roofline (area = share of time)", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="lower right", markerscale=0.5)
    fig.tight_layout()
    return _save(fig, path)


def plot_time_roofline(a: Analysis, path: str | Path) -> Path:
    """Time-based roofline (Yang et al. 2020): time against FLOPs with T = F/P, and time against
    compulsory bytes with T = B/BW for every level; the dispatch floor as a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax_f, ax_b) = plt.subplots(1, 2, figsize=(12, 5), dpi=110, sharey=True)
    used = _used_roofs(a)
    floor = a.roofs["dispatch_overhead_s"]
    ops = [o for o in a.ops if o.flops is not None and o.time_s > 0]
    for ax, attr in ((ax_f, "flops"), (ax_b, "bytes")):
        xs = [getattr(o, attr) for o in ops if getattr(o, attr)]
        if not xs:
            continue
        grid = np.logspace(np.log10(min(xs)) - 0.5, np.log10(max(xs)) + 0.5, 100)
        if attr == "flops":
            for (name, peak), style in zip(used, ("-", "--", "-.", ":") * 3, strict=False):
                ax.plot(grid, grid / peak, color="black", lw=1.5, ls=style,
                        label=f"T = F / {fmt_rate(peak, 'FLOP/s')}" + (f" ({name})" if len(used) > 1 else ""))
        else:
            for level, bw in a.roofs["bandwidth"].items():
                ax.plot(grid, grid / bw, color=LEVEL_COLOURS.get(level, "grey"), lw=1.5, label=f"T = B / {level} {fmt_rate(bw, 'B/s')}")
        ax.axhline(floor, color="grey", ls="--", lw=1, label=f"dispatch floor {floor * 1e6:.1f} us")
        seen: set[str] = set()
        for o in ops:
            x = getattr(o, attr)
            if not x:
                continue
            ax.scatter(x, o.time_s, s=18, alpha=0.7, color=KIND_COLOURS.get(o.kind, "black"), edgecolors="none",
                       label=o.kind if o.kind not in seen else None)
            seen.add(o.kind)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    ax_f.set_xlabel("FLOPs")
    ax_b.set_xlabel("compulsory bytes")
    ax_f.set_ylabel("measured time (s)")
    fig.suptitle(f"{a.model}, batch {a.batch}, {_where(a)}: time-based roofline "
                 f"(lower bound {a.lower_bound_s * 1e3:.2f} ms, measured {a.end_to_end_s * 1e3:.2f} ms)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_trajectory(analyses: Sequence[Analysis], path: str | Path, top: int = 5) -> Path:
    """How the whole model and its top ops move on the roofline as threads or batch grow
    (Javed et al. 2019): one point per analysis, joined in the order given."""
    fig, ax = new_figure()
    last = analyses[-1]
    for i, a in enumerate(analyses):
        _roof_lines(ax, a.roofs, _used_roofs(a)[0][1], alpha=0.25 + 0.75 * (i == len(analyses) - 1),
                    label=i == len(analyses) - 1)

    def label(a: Analysis) -> str:
        return f"b{a.batch}/t{a.threads}" if a.device == "cpu" else f"b{a.batch}"

    xs = [a.flops / a.bytes for a in analyses]
    ys = [a.flops / a.end_to_end_s for a in analyses]
    ax.plot(xs, ys, "-*", color="gold", mec="black", ms=12, lw=2, label="whole model", zorder=5)
    for a, x, y in zip(analyses, xs, ys, strict=True):
        ax.annotate(label(a), (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    # The top ops of the last point, followed through every point by their name.
    names = [o.name for o in sorted((o for o in last.ops if o.flops), key=lambda o: -o.time_s)[:top]]
    for name in names:
        pts = []
        for a in analyses:
            o = next((o for o in a.ops if o.name == name), None)
            if o and o.flops and o.moved_bytes and o.time_s > 0:
                pts.append((o.flops / o.moved_bytes, o.flops / o.time_s, o.kind))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", ms=4, lw=1,
                    color=KIND_COLOURS.get(pts[0][2], "black"), alpha=0.8, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1e-2, 1e4)
    ax.set_xlabel("arithmetic intensity (FLOP / compulsory byte)")
    ax.set_ylabel("attained performance (FLOP/s)")
    ax.set_title(f"{last.model}: roofline trajectory over " + ", ".join(label(a) for a in analyses)
                 + ("" if last.device == "cpu" else f" on {last.device}"), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return _save(fig, path)


def plot_analysis(analyses: Sequence[Analysis], directory: str | Path, fmt: str = "png") -> list[Path]:
    """All analysis figures into ``directory``: per point the ops roofline and the time-based
    roofline, and a trajectory when there is more than one point."""
    check_figure_format(fmt)
    d = Path(directory)
    out: list[Path] = []
    for a in analyses:
        stem = f"{_slug(a.model)}_b{a.batch}_t{a.threads}"
        out.append(plot_ops_roofline(a, d / f"{stem}_roofline.{fmt}"))
        out.append(plot_time_roofline(a, d / f"{stem}_time_roofline.{fmt}"))
    if len(analyses) > 1:
        out.append(plot_trajectory(analyses, d / f"{_slug(analyses[0].model)}_trajectory.{fmt}"))
    return out


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(name).name)
