"""The self-contained HTML report of a kernel-family sweep: its figures embedded as data URIs (the
SVG and PNG files beside it), the findings, every point and what was skipped; no script, no
network access."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rooftune.fileio import write_atomic
from rooftune.paths import output_dir
from rooftune.report.html import CSS, escape, figure_html, rate_text, table_html, time_text

if TYPE_CHECKING:
    from rooftune.sweep import SweepResult

CAPTIONS = {
    "time_flops": "Time-based roofline: time per call against FLOPs; dashed lines T = F/P for each roof, "
                  "dotted the dispatch floor",
    "time_bytes": "Time per call against the bytes moved; dashed lines T = B/BW for each memory level",
    "attained": "Attained FLOP/s against each swept parameter, one line per pass, precision and variant",
    "speedup": "Speedup of each variant over the fp32 framework default (ratio of medians)",
}


def render(result: SweepResult, figures: dict[str, list[Path]]) -> str:
    from rooftune.sweep import get_family

    fam = get_family(result.family)
    r = result
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>rooftune sweep {escape(r.family)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>rooftune sweep: {escape(fam.description)}</h1>",
             f"<p class=dim>{escape(r.device)}, platform {escape(r.platform_id)} "
             f"({escape(r.platform.get('cpu_model') or r.platform.get('name', ''))}); "
             f"{r.added} points run, {r.resumed} from the store, {len(r.skipped)} skipped; "
             f"{r.duration_s:.0f} s; written {datetime.now().isoformat(timespec='seconds')}</p>"]
    if r.stopped_by_budget:
        parts.append("<p class=warn>Stopped by the budget: run the same sweep again to continue.</p>")
    parts.append("<h2>Findings</h2><ul>" + "".join(f"<li>{escape(f)}</li>" for f in r.findings) + "</ul>")
    parts.append("<h2>Figures</h2>")
    for name, paths in figures.items():
        png = next((p for p in paths if p.suffix == ".png"), None)
        parts.append(figure_html(png, CAPTIONS.get(name, name)))
    rows = []
    for p in r.points:
        if not p.ok:
            rows.append([fam.describe(p.params), p.pass_, p.precision, p.variant.label(), "-", "-", "-", "-", "-",
                         "failed", p.reason])
            continue
        rows.append([fam.describe(p.params), p.pass_, p.precision, p.variant.label(), time_text(p.median_s),
                     f"{p.rel_ci * 100:.1f} %" if p.rel_ci is not None else "-",
                     rate_text(p.attained_flops, "FLOP/s"), rate_text(p.attained_bandwidth, "B/s"),
                     f"{p.efficiency * 100:.0f} %" if p.efficiency is not None else "-",
                     p.bound + (" (flagged)" if p.flagged else ""), p.verified])
    parts.append("<h2>Points</h2>" + table_html(
        ["point", "pass", "precision", "variant", "time", "+-CI", "FLOP/s", "B/s", "of roof", "bound", "check"],
        rows, numeric={4, 5, 6, 7, 8}))
    if r.skipped:
        parts.append("<h2>Skipped</h2>" + table_html(
            ["point", "pass", "precision", "variant", "reason"],
            [[fam.describe(s.params), s.pass_, s.precision, s.variant, s.reason] for s in r.skipped]))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_sweep_report(result: SweepResult, directory: str | Path) -> Path:
    """The figures (PNG and SVG) and ``report.html`` into ``directory``; returns the page's path."""
    from rooftune.report.sweep_figures import plot_sweep_result

    d = output_dir(directory, "--report", parents=True)
    d.mkdir(parents=True, exist_ok=True)
    figures = plot_sweep_result(result, d)
    return write_atomic(d / "report.html", render(result, figures))
