"""Figures of the machine's roofline and its bandwidth sweep (matplotlib, no display needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.errors import InvalidArgument
from rooftune.fileio import save_figure
from rooftune.units import fmt_rate, fmt_size

if TYPE_CHECKING:
    from rooftune.machine import Ceilings
    from rooftune.machine.gpu import GpuCeilings

FIGURE_FORMATS = (".png", ".svg", ".pdf")
LEVEL_COLOURS = {"L1": "#1b9e77", "L2": "#d95f02", "L3": "#7570b3", "DRAM": "#e7298a"}
_ROOF_LABELS = {
    "fp32": "fp32 FMA peak",
    "fp64": "fp64 FMA peak",
    "gemm_fp32": "sgemm (torch)",
    "gemm_bf16": "bf16 GEMM (torch)",
    "gemm_int8": "int8 GEMM (torch, ops/s)",
    "gemm_tf32": "tf32 GEMM (torch)",
    "gemm_fp16": "fp16 GEMM (torch)",
    "gemm_fp8": "fp8 GEMM (torch, e4m3)",
}


def check_figure_path(path: str | Path, option: str = "plot file") -> Path:
    """Refuse a path matplotlib cannot write, before anything is measured."""
    from rooftune.paths import output_file

    return output_file(path, option, FIGURE_FORMATS)


def check_figure_format(fmt: str, option: str = "format") -> str:
    """Refuse a figure format matplotlib is not asked to write here, before anything is measured."""
    if f".{fmt}" not in FIGURE_FORMATS:
        raise InvalidArgument(option, fmt, f"allowed {', '.join(f[1:] for f in FIGURE_FORMATS)}")
    return fmt


def new_figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(8, 5.5), dpi=110)


def label_roofs(ax: Any, labelled: Sequence[tuple[str, float]], left: float, right: float) -> None:
    """Each roof's label (highest roof first) at the right end of its line, or at the left end when
    the roof labelled before it is less than 1.25x above and took the right (three roofs within
    1.25x of each other still crowd one end)."""
    last = {"right": math.inf, "left": math.inf}
    for text, v in labelled:
        side = "right" if last["right"] >= 1.25 * v or last["left"] < 1.25 * v else "left"
        ax.annotate(text, (right * 0.2 if side == "right" else left * 1.3, v), fontsize=8, ha=side, va="bottom")
        last[side] = v


def plot_roofline(ceilings: Ceilings | GpuCeilings, path: str | Path) -> Path:
    """Log-log roofline: attainable FLOP/s against arithmetic intensity, every ceiling labelled."""
    import numpy as np

    fig, ax = new_figure()
    ai = np.logspace(-3, 4, 400)
    roofs = {k: v for k, v in ceilings.peak_flops.items() if v > 0}
    top = max(roofs.values()) if roofs else 1e9
    for level, bw in ceilings.bandwidth.items():
        y = np.minimum(bw * ai, top)
        colour = LEVEL_COLOURS.get(level, "grey")
        ax.plot(ai, y, color=colour, lw=1.8, label=f"{level} {fmt_rate(bw, 'B/s')}")
        x_label = 2e-3
        ax.annotate(
            f"{level}: {fmt_rate(bw, 'B/s')}",
            (x_label, bw * x_label),
            rotation=33,
            color=colour,
            fontsize=8,
            va="bottom",
        )
    styles = ["-", "--", "-.", ":", (0, (5, 1))]
    for (_name, v), style in zip(sorted(roofs.items(), key=lambda kv: -kv[1]), styles * 2, strict=False):
        ax.axhline(v, color="black", ls=style, lw=1.2)
    label_roofs(ax, [(f"{_ROOF_LABELS.get(name, name)}: {fmt_rate(v, 'FLOP/s')}", v)
                     for name, v in sorted(roofs.items(), key=lambda kv: -kv[1])], 1e-3, 1e4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    lo = min(min(ceilings.bandwidth.values(), default=1e9) * 1e-3, top / 1e4)
    ax.set_ylim(lo, top * 3)
    ax.set_xlim(1e-3, 1e4)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable performance (FLOP/s)")
    ax.set_title(
        f"Roofline of {ceilings.describe()}" + (" [quick]" if ceilings.quick else ""),
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, title="bandwidth")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_sweep(ceilings: Ceilings | GpuCeilings, path: str | Path) -> Path:
    """Bandwidth against working set for each kernel, with cache capacities and detected plateaus."""
    fig, ax = new_figure()
    markers = {"read": "o", "copy": "s", "triad": "^"}
    for kind, points in ceilings.sweep.items():
        xs = [b for b, _ in points]
        ys = [r / 1e9 for _, r in points]
        ax.plot(xs, ys, marker=markers.get(kind, "."), ms=3, lw=1, label=f"{kind}")
        for pl in ceilings.plateaus.get(kind, []):
            colour = LEVEL_COLOURS.get(pl.level or "", "grey")
            ax.hlines(pl.bandwidth / 1e9, pl.start_bytes, pl.end_bytes, colors=colour, lw=4, alpha=0.5)
    # Capacities and ceilings are drawn against the sweep; without one (ceilings made by hand or
    # read from an old store) their annotations would sit on empty linear axes and break the layout.
    has_data = any(math.isfinite(r) for pts in ceilings.sweep.values() for _, r in pts)
    if has_data:
        for level, cap in ceilings.capacity_bytes.items():
            ax.axvline(cap, color=LEVEL_COLOURS.get(level, "grey"), ls=":", lw=1)
            ax.annotate(f"{level} {fmt_size(cap)}", (cap, 1), rotation=90, fontsize=8,
                        xycoords=("data", "axes fraction"), va="top", ha="right")
        for level, bw in ceilings.bandwidth.items():
            ax.annotate(f"{level}: {bw / 1e9:.0f} GB/s", (0.99, bw / 1e9), xycoords=("axes fraction", "data"),
                        ha="right", va="bottom", fontsize=8, color=LEVEL_COLOURS.get(level, "grey"))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    ax.set_xlabel("working set, all arrays (bytes)")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.set_title(
        f"Bandwidth sweep on {ceilings.describe()}\nbars = detected plateaus, dotted = cache capacity",
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    if has_data:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no sweep data", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    return save_figure(fig, path)
