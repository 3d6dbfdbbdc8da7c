"""A serving phase's figure: latency against offered load for the best and every peer, each
setup's probes of its rate search (p99 or p90 with its 95 % interval, and the p50), the SLO line,
and each setup's knee: the largest rate that met the target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rooftune.fileio import save_figure
from rooftune.report.figures import new_figure


def plot_serving(serving: dict[str, Any], model: str, path: str | Path) -> Path:
    q = serving["quantile"]
    fig, ax = new_figure()
    shown = [s for s in serving["setups"] if s.get("error") is None and s.get("probes")
             and (s["peer"] or s["name"] == serving.get("best"))]
    for s in sorted(shown, key=lambda s: s["name"] != serving.get("best")):
        probes = sorted(s["probes"], key=lambda p: p["rate"])
        rates = [p["rate"] for p in probes]
        value = [p["percentiles"][q]["ms"] for p in probes]
        low = [max(0.0, v - (p["percentiles"][q]["lo"] if p["percentiles"][q]["lo"] is not None else v))
               for v, p in zip(value, probes, strict=True)]
        high = [((p["percentiles"][q]["hi"] if p["percentiles"][q]["hi"] is not None else v) - v)
                for v, p in zip(value, probes, strict=True)]
        best = s["name"] == serving.get("best")
        line = ax.errorbar(rates, value, yerr=[low, high], marker="*" if best else "o", ms=9 if best else 5,
                           lw=2 if best else 1, capsize=2, label=f"{s['name']} ({s.get('precision', '')}), {q}",
                           zorder=3 if best else 2)
        colour = line[0].get_color()
        ax.plot(rates, [p["percentiles"]["p50"]["ms"] for p in probes], ls=":", color=colour, lw=1, alpha=0.7)
        if s["rate"] > 0:  # the knee: the largest rate that met the target
            ax.axvline(s["rate"], color=colour, ls="--", lw=0.8, alpha=0.6)
    ax.axhline(serving["slo_ms"], color="red", lw=1.5, label=f"SLO: {q} <= {serving['slo_ms']:g} ms")
    ax.set_xlabel("offered load: Poisson arrivals (requests/s); dashed: each setup's largest rate within the SLO")
    ax.set_ylabel(f"latency, queueing included (ms): {q} with its 95 % interval; dotted: p50")
    ax.set_yscale("log")
    ax.set_title(f"{model}: latency against offered load", parse_math=False)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save_figure(fig, path)
