"""Figures of a tuning study and a primitive selection: the trials, the metric on the user's data
against latency, the speedups with their confidence intervals, and the primitive chosen per
convolution."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.fileio import save_figure
from rooftune.report.figures import new_figure

if TYPE_CHECKING:
    from rooftune.selection import SelectResult
    from rooftune.tuning import TuneResult

RUNTIME_COLOURS = {"eager": "#1f77b4", "torchscript": "#ff7f0e", "compile": "#2ca02c", "onnxruntime": "#d62728",
                   "openvino": "#9467bd", "ncnn": "#8c564b"}
PRIMITIVE_CMAP = "tab20"


def _value(t: Any, objective: str) -> float:
    """The trial's own figure (the plot is of trials, each in its own minute)."""
    latency = t.trial_latency_s if t.figures_from != "trial" else t.latency_s
    throughput = t.trial_throughput if t.figures_from != "trial" else t.throughput
    return latency * 1e3 if objective == "latency" else throughput


def plot_trials(r: TuneResult, path: str | Path) -> Path:
    """Every trial in the order it ran: latency (ms, lower is better) or samples/s, coloured by
    runtime; the guideline and baselines marked, the best starred, failed trials as crosses."""
    fig, ax = new_figure()
    ok = [(i, t) for i, t in enumerate(r.trials) if t.ok]
    failed = [i for i, t in enumerate(r.trials) if not t.ok]
    seen: set[str] = set()
    for i, t in ok:
        rt = t.config.runtime
        ax.scatter(i, _value(t, r.objective), color=RUNTIME_COLOURS.get(rt, "grey"), s=28, alpha=0.8,
                   label=rt if rt not in seen else None, zorder=3)
        seen.add(rt)
    values = [_value(t, r.objective) for _, t in ok]
    if failed and values:
        y = max(values) * 1.08 if r.objective == "latency" else min(values) * 0.92
        ax.scatter(failed, [y] * len(failed), marker="x", color="#888888", s=24, label="failed (not counted)", zorder=2)
    # by configuration: the result's best, guideline and baselines carry the interleaved figures,
    # the trials their own
    fixed = {r.guideline.config.key(): "guideline", **{t.config.key(): name for name, t in r.baselines.items()}}
    for i, t in ok:
        if t.config.key() in fixed:
            ax.annotate(fixed[t.config.key()], (i, _value(t, r.objective)), fontsize=7, xytext=(4, 4),
                        textcoords="offset points")
    if r.best.ok:
        bi = next((i for i, t in enumerate(r.trials) if t.ok and t.config.key() == r.best.config.key()), None)
        if bi is not None:
            ax.scatter(bi, _value(r.trials[bi], r.objective), marker="*", s=220, color="gold", edgecolor="black", zorder=4,
                       label=f"best: {r.best.config.describe()[:60]}")
    ax.set_xlabel("trial (guideline and baselines first, then the search)")
    ax.set_ylabel("trial's latency per inference, p50 (ms)" if r.objective == "latency" else "trial's samples/s")
    ax.set_title(f"{r.model}: {len(r.trials)} configurations, objective {r.objective}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return save_figure(fig, path)


#: Colour and marker of each kind of configuration in the figure of the metric against latency.
KIND_STYLES = {"fp32": ("#1f77b4", "o"), "bf16": ("#2ca02c", "s"), "int8": ("#d62728", "^"),
               "int8 mixed": ("#9467bd", "D"), "peer": ("#7f7f7f", "P")}


@dataclass(frozen=True)
class ParetoPoint:
    """One configuration judged on the user's data: its trial's latency, its metric there with the
    95 % bootstrap interval, and whether it met the budget (``ok``) and is on the Pareto front."""

    label: str
    kind: str
    precision: str
    latency_ms: float
    value: float
    low: float
    high: float
    ok: bool
    best: bool = False
    front: bool = False


def _kind(t: Any, peers: set[str]) -> str:
    """peer (a baseline, whatever it computes in), else the precision, int8 with layers kept at
    higher precision as ``int8 mixed``."""
    if t.config.key() in peers:
        return "peer"
    if t.precision == "int8" and t.config.keep:
        return "int8 mixed"
    return t.precision


def pareto_points(r: TuneResult) -> list[ParetoPoint]:
    """Every configuration of the study with a metric on the user's data and a trial latency (one
    refused before it was timed has none), each once, in the order they ran; the verified ones not
    beaten by another on both latency and metric marked as the front."""
    peers = {b.config.key() for b in r.baselines.values()}
    names = {b.config.key(): n for n, b in r.baselines.items()}
    best = r.best.config.key() if r.best.ok else None
    by_key: dict[str, ParetoPoint] = {}
    for t in r.trials:
        acc = t.verify.get("accuracy")
        if not isinstance(acc, dict) or "value" not in acc:
            continue
        latency = (t.trial_latency_s if t.figures_from != "trial" else t.latency_s) * 1e3
        if not math.isfinite(latency):
            continue
        key = t.config.key()
        if key in by_key and by_key[key].ok and not t.ok:
            continue  # the same configuration measured again: its verified look stands
        lo, hi = acc.get("interval") or (acc["value"], acc["value"])
        by_key[key] = ParetoPoint(names.get(key) or t.config.name or t.config.describe()[:40], _kind(t, peers),
                                  t.precision, latency, float(acc["value"]), float(lo), float(hi), t.ok, key == best)
    points = list(by_key.values())
    ok = [p for p in points if p.ok]

    def beaten(p: ParetoPoint) -> bool:
        return any(q.latency_ms <= p.latency_ms and q.value >= p.value
                   and (q.latency_ms < p.latency_ms or q.value > p.value) for q in ok)

    return [replace(p, front=p.ok and not beaten(p)) for p in points]


def plot_accuracy_pareto(r: TuneResult, path: str | Path) -> Path:
    """The metric on the evaluation part of the user's data (with its 95 % interval) against each
    trial's latency, one point per configuration marked by its kind, refused ones hollow; the
    Pareto front of the verified ones (lower latency, higher metric) as a staircase, and fp32's
    metric less the budget as a line."""
    points = pareto_points(r)
    acc = next(t.verify["accuracy"] for t in r.trials if isinstance(t.verify.get("accuracy"), dict))
    unit = acc.get("unit", "")
    fig, ax = new_figure()
    seen: set[str] = set()
    for p in points:
        colour, marker = KIND_STYLES.get(p.kind, ("black", "o"))
        label = None
        if p.kind not in seen:
            label, seen = p.kind, seen | {p.kind}
        ax.errorbar(p.latency_ms, p.value, yerr=[[max(p.value - p.low, 0.0)], [max(p.high - p.value, 0.0)]],
                    fmt=marker, color=colour, mfc=colour if p.ok else "none", ms=7, capsize=3, alpha=0.85,
                    label=label, zorder=3)
        if not p.label.startswith("trial "):  # the named configurations; the search's trials stay unlabelled
            text = f"{p.label} ({p.precision})" if p.kind == "peer" else p.label
            ax.annotate(text, (p.latency_ms, p.value), fontsize=7, xytext=(5, 4), textcoords="offset points",
                        parse_math=False)
    if any(not p.ok for p in points):
        ax.scatter([], [], marker="o", facecolors="none", edgecolors="black", label="refused (over the budget)")
    front = sorted((p for p in points if p.front), key=lambda p: p.latency_ms)
    if front:
        ax.plot([p.latency_ms for p in front], [p.value for p in front], drawstyle="steps-post", color="black",
                lw=1.2, alpha=0.6, label="Pareto front (lower latency, higher metric)", zorder=2)
    best = next((p for p in points if p.best), None)
    if best is not None:
        ax.scatter(best.latency_ms, best.value, marker="*", s=220, color="gold", edgecolor="black", zorder=4,
                   label="best")
    floor = acc["fp32"] - acc["max_drop"]
    ax.axhline(acc["fp32"], color="#1f77b4", ls=":", lw=1, label=f"fp32's {acc['fp32']:.2f}{unit}")
    ax.axhline(floor, color="#e69500", ls="--", lw=1.5,
               label=f"budget: fp32's less {acc['max_drop']:g} = {floor:.2f}{unit}")
    untimed = sum(1 for t in r.trials if isinstance(t.verify.get("accuracy"), dict)
                  and not math.isfinite(t.trial_latency_s if t.figures_from != "trial" else t.latency_s))
    ax.set_xlabel("trial's latency per call, p50 (ms)"
                  + (f"; {untimed} configuration(s) refused before timing not drawn" if untimed else ""))
    ax.set_ylabel(f"{acc['metric']}{f' ({unit})' if unit else ''}, 95 % bootstrap interval")
    ax.set_title(f"{r.model}: {acc['metric']} on {acc['samples']} evaluation samples against latency",
                 parse_math=False)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return save_figure(fig, path)


def speedup_rows(tune: TuneResult | None, select: SelectResult | None) -> list[tuple[str, float, float, float]]:
    """(label, ratio, CI low, CI high) for every interleaved comparison of the run."""
    rows: list[tuple[str, float, float, float]] = []
    if tune is not None:
        for name, sp in tune.speedup.items():
            ratio = sp.get("ratio", math.nan)
            if math.isfinite(ratio):
                rows.append((f"tuned vs {name}", ratio, sp.get("ci_low", ratio), sp.get("ci_high", ratio)))
    if select is not None:
        for name, c in select.comparisons.items():
            if math.isfinite(c["speedup"]):
                rows.append((f"selected primitives vs {name}", c["speedup"], c["ci"][0], c["ci"][1]))
    return rows


def plot_speedups(tune: TuneResult | None, select: SelectResult | None, path: str | Path) -> Path:
    """Each speedup measured interleaved (A B B A), as a bar with its 95 % confidence interval."""
    rows = speedup_rows(tune, select)
    fig, ax = new_figure()
    if not rows:
        ax.text(0.5, 0.5, "no comparison was measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return save_figure(fig, path)
    # A comparison with too few pairs has an unbounded interval: drawn without its bar, and said.
    known = [math.isfinite(r[2]) and math.isfinite(r[3]) for r in rows]
    labels = [r[0] if k else f"{r[0]} (too few pairs for a CI)" for r, k in zip(rows, known, strict=True)]
    ratios = [r[1] for r in rows]
    lo = [r[2] if k else r[1] for r, k in zip(rows, known, strict=True)]
    hi = [r[3] if k else r[1] for r, k in zip(rows, known, strict=True)]
    err = [[max(r - low, 0) for r, low in zip(ratios, lo, strict=True)],
           [max(high - r, 0) for r, high in zip(ratios, hi, strict=True)]]
    colours = ["#7f7f7f" if not k else "#2ca02c" if low > 1 else "#d62728" if high < 1 else "#7f7f7f"
               for k, low, high in zip(known, lo, hi, strict=True)]
    y = list(range(len(rows)))
    ax.barh(y, ratios, xerr=err, color=colours, alpha=0.8, capsize=3)
    ax.axvline(1.0, color="black", lw=1)
    for yi, r, high in zip(y, ratios, hi, strict=True):
        ax.text(max(r, high), yi, f"  {r:.2f}x", va="center", fontsize=8)
    ax.set_xlim(0, max(*hi, 1.0) * 1.15)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speedup (time of the other / time of ours), 95 % CI; green: faster with the whole CI")
    ax.set_title("Speedups, each measured interleaved in this run")
    fig.tight_layout()
    return save_figure(fig, path)


def plot_selection(r: SelectResult, path: str | Path) -> Path:
    """The time the selector expected per convolution, coloured by the primitive it chose."""
    import matplotlib

    choices = r.selection.choices
    fig, ax = new_figure()
    prims = sorted({c.primitive for c in choices})
    cmap = matplotlib.colormaps[PRIMITIVE_CMAP]
    colour = {p: cmap(i % 20) for i, p in enumerate(prims)}
    fell = {f["layer"] for f in r.verification.fallbacks}
    for i, c in enumerate(choices):
        ax.bar(i, c.time_s * 1e3, color=colour[c.primitive], hatch="//" if c.layer in fell else None,
               edgecolor="black" if c.extrapolated else None)
    for p in prims:
        ax.bar(0, 0, color=colour[p], label=p)
    ax.set_xlabel("convolution, in execution order (hatched: fell back to the default path; outlined: extrapolated)")
    ax.set_ylabel("expected time (ms)")
    ax.set_title(f"{r.model}: primitive per convolution ({r.selection.strategy}), "
                 f"conversions {r.selection.conversion_s * 1e3:.2f} ms")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)
