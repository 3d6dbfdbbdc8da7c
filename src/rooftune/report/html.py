"""The self-contained HTML report of ``rooftune optimize``: figures embedded as data URIs, no
script, no network access; readable offline and shareable as one file."""

from __future__ import annotations

import base64
import html
import math
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooftune.units import ci_text, finite, fmt_rate, fmt_size, fmt_time, threads_of

if TYPE_CHECKING:
    from rooftune.report.optimize_result import OptimizeResult

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em} th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#f3f3f3} td.n{text-align:right;font-variant-numeric:tabular-nums}
.headline{font-size:1.25em;background:#eef7ee;border-left:5px solid #2ca02c;padding:.6em 1em}
.warn{background:#fff6e5;border-left:5px solid #e69500;padding:.5em 1em}
.bad{color:#b00020} .ok{color:#1a7f37} .dim{color:#666}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #eee} figcaption{font-size:.85em;color:#555}
pre{background:#f6f6f6;padding:.7em;overflow-x:auto;font-size:.85em}
"""


def escape(x: Any) -> str:
    return html.escape(str(x))


def time_text(seconds: float | None) -> str:
    return fmt_time(seconds) if finite(seconds) else "-"


def rate_text(v: float | None, unit: str) -> str:
    return fmt_rate(v, unit) if finite(v) else "-"


def table_html(header: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=n' if i in numeric else ''}>{escape(c)}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure_html(path: Path | None, caption: str) -> str:
    if path is None or not path.is_file():
        return ""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(caption)} ({escape(path.name)})</figcaption></figure>")


def write_figures(r: OptimizeResult) -> dict[str, Path]:
    """Every figure the run's results allow, as PNG in ``out/figures``; one that fails is left out."""
    from rooftune.report.analysis_figures import plot_ops_roofline, plot_time_roofline
    from rooftune.report.figures import plot_roofline, plot_sweep
    from rooftune.report.tuning_figures import (
        pareto_points,
        plot_accuracy_pareto,
        plot_selection,
        plot_speedups,
        plot_trials,
    )

    d = r.out / "figures"
    d.mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[str, Any, tuple[Any, ...]]] = []
    if r.ceilings is not None:
        jobs += [("roofline", plot_roofline, (r.ceilings,)), ("bandwidth_sweep", plot_sweep, (r.ceilings,))]
    if r.analysis is not None:
        jobs += [("model_roofline", plot_ops_roofline, (r.analysis,)),
                 ("time_roofline", plot_time_roofline, (r.analysis,))]
    if r.tune is not None:
        jobs.append(("trials", plot_trials, (r.tune,)))
        if r.tune.serving is not None and r.tune.serving["scenario"] == "server":
            from rooftune.report.serving_figures import plot_serving

            jobs.append(("serving", plot_serving, (r.tune.serving, r.tune.model)))
        if pareto_points(r.tune):  # the configurations judged on the user's data
            jobs.append(("accuracy_pareto", plot_accuracy_pareto, (r.tune,)))
    if r.tune is not None or r.select is not None:
        jobs.append(("speedups", plot_speedups, (r.tune, r.select)))
    if r.select is not None:
        jobs.append(("selection", plot_selection, (r.select,)))
    made: dict[str, Path] = {}
    for name, fn, args in jobs:
        try:
            made[name] = fn(*args, d / f"{name}.png")
            fn(*args, d / f"{name}.svg")  # the same figure as vector graphics, for papers and slides
        except Exception as exc:  # a figure that cannot be drawn is noted, the report still written
            r.notes.append(f"figure {name} not drawn: {type(exc).__name__}: {exc}")
    for name, p in made.items():
        r.files[f"figure {name}"] = f"{p.relative_to(r.out)} (and .svg)"
    return made


def _machine(r: OptimizeResult, figs: dict[str, Path]) -> str:
    c = r.ceilings
    if c is None:
        return "<p class=dim>The ceilings were not measured (see the steps).</p>"
    peaks = [[name, *[rate_text(per.get(n, math.nan), "FLOP/s") for n in c.threads]]
             for name, per in c.peak_flops_per_thread.items()]
    peaks += [[name, *["skipped: " + reason for _ in c.threads]] for name, reason in c.skipped.items()]
    bw = [[level, fmt_size(c.capacity_bytes[level]) if c.capacity_bytes.get(level) else "-", rate_text(v, "B/s")]
          for level, v in c.bandwidth.items()]
    when = datetime.fromtimestamp(c.measured_at).strftime("%Y-%m-%d %H:%M")
    return (
        f"<p>Measured {escape(when)}{' (quick)' if c.quick else ''}{', read from the store' if c.from_store else ''}. "
        f"Dispatch overhead of one tiny torch op: <b>{time_text(c.dispatch_overhead_s)}</b> (the floor of the time-based roofline).</p>"
        + table_html(["roof", *[f"{n} thread(s)" for n in c.threads]], peaks, set(range(1, len(c.threads) + 1)))
        + table_html(["memory level", "capacity", f"bandwidth ({threads_of(c.max_threads)})"], bw, {1, 2})
        + figure_html(figs.get("roofline"), "The machine's roofline: every measured compute and bandwidth ceiling")
        + figure_html(figs.get("bandwidth_sweep"), "Bandwidth against working-set size, with the detected plateaus")
    )


def _between_ops(a: Any) -> str:
    """What the op times leave out of the end-to-end time (:attr:`Analysis.between_ops_s`): a
    negative remainder is not said as if it were time."""
    lo, hi = a.accounting_ci
    ci = f", 95 % CI {lo:.0%}-{hi:.0%}" if math.isfinite(lo) and math.isfinite(hi) else ""
    added = (f"each run's op times add up to {a.accounting_ratio:.0%} of the end-to-end run timed beside it "
             f"(the median{ci})")
    if a.between_ops_s is not None:
        return f"{added}: {time_text(a.between_ops_s)} is not in any op (Python and framework between ops)"
    return f"{added}: no time between ops is measurable"


def _analysis(r: OptimizeResult, figs: dict[str, Path]) -> str:
    a = r.analysis
    if a is None:
        return "<p class=dim>The model was not analysed (see the steps).</p>"
    bounds = ", ".join(f"{k} {v:.0%}" for k, v in a.by_bound().items())
    kinds = [[k["kind"], k["ops"], time_text(k["time_s"]), f"{k['share']:.0%}", rate_text(k["flops"], "FLOP"), time_text(k["headroom_s"])]
             for k in a.by_kind()[:10]]
    opp = [[g["name"] if g["count"] == 1 else f"{g['count']} alike", g["module"], time_text(g["time_s"]), time_text(g["headroom_s"]),
            g["bound"], g["reason"]] for g in a.opportunity_groups(10)]
    return (
        f"<p>End to end <b>{time_text(a.end_to_end_s)}</b> (IQR {time_text(a.end_to_end_iqr_s)}) at batch {a.batch} on {a.threads} "
        f"thread(s); the roofline's lower bound is {time_text(a.lower_bound_s)}, so the model runs at "
        f"<b>{a.efficiency:.0%}</b> of what the ceilings allow. {rate_text(a.flops, 'FLOP')} and {rate_text(a.bytes, 'B')} "
        f"compulsory traffic. Time by bound (each op's median time, as a share of the end-to-end time): {escape(bounds)}; "
        f"{_between_ops(a)}. Each op's median leaves out the slow calls that land in one op or another from run to run, "
        f"so these shares can add up to less than the runs' own sums.</p>"
        + "<h3>Where the time goes, by op kind (each op's median time)</h3>"
        + table_html(["kind", "ops", "time", "share", "FLOPs", "headroom"], kinds, {1, 2, 3, 4, 5})
        + "<h3>Top opportunities</h3>"
        + table_html(["op(s)", "module", "time", "headroom", "bound", "why"], opp, {2, 3})
        + figure_html(figs.get("model_roofline"), "Every op on the roofline: area is its share of the time, colour its kind")
        + figure_html(figs.get("time_roofline"), "Time-based roofline: time against FLOPs, with the dispatch-overhead floor")
        + "".join(f"<p class=warn>{escape(w)}</p>" for w in a.warnings)
    )


def _tuning(r: OptimizeResult, figs: dict[str, Path]) -> str:
    t = r.tune
    steps = getattr(r, "steps", None) or {}  # (a result of the tune step alone has no steps)
    errors = steps["tune"].errors if "tune" in steps else []
    if t is None and errors:  # every trial failed: why, each error once with how many trials gave it
        return ("<p class=warn>The runtime configuration was not tuned: no configuration ran and verified. "
                "The trials' errors:</p>" + table_html(["trials", "error"], [[n, e] for n, e in errors], {0}))
    if t is None:
        return "<p class=dim>The runtime configuration was not tuned (see the steps).</p>"
    from rooftune.tuning.table import guard_lines, tune_columns, tune_rows

    rows = tune_rows(t, error_width=120)
    failed = [x for x in t.trials if not x.ok]
    fails = table_html(["configuration", "why it failed"], [[x.config.describe(), x.error[:200]] for x in failed[:15]])
    standing = t.guideline_text()
    reversal = t.reversal_line()
    unsteady = t.unsteady_line()
    drift = t.drift_line()
    return (
        f"<p>{len(t.trials)} configurations in {t.duration_s:.0f} s ({len(failed)} failed, {t.resumed} from the store); "
        f"objective {escape(t.objective)}, {escape(t.batch_text())}. Every trial ran in a fresh process and its output was checked "
        f"against the fp32 eager output; the best was then re-measured interleaved (A B B A) against every baseline.</p>"
        + table_html([*(cols := tune_columns(t))[:-1], "best is (95 % CI)"], rows, set(range(3, len(cols) - 1)))
        + "".join(f"<p><b>{escape(line)}</b></p>" for line in t.headline_lines())
        + "".join(f"<p class=dim>{escape(line)}</p>" for line in guard_lines(t))
        + (f"<p class=dim>{escape(reversal)}</p>" if reversal else "")
        + (f"<p class=warn>{escape(unsteady)}</p>" if unsteady else "")
        + (f"<p class=warn>{escape(drift)}</p>" if drift else "")
        + (f"<p>The instant guideline configuration is {escape(standing)}: "
           + escape("; ".join(t.guideline_reasons)) + "</p>" if standing else "")
        + figure_html(figs.get("trials"), "Every trial of the search, in order")
        + figure_html(figs.get("accuracy_pareto"), "The metric on the evaluation part of your data against each "
                  "configuration's trial latency, with its 95 % interval; the Pareto front and fp32's metric less the budget")
        + _sensitivity(t.sensitivity)
        + _serving(t.serving, figs)
        + (f"<details><summary>{len(failed)} failed configurations (never reported as best)</summary>{fails}</details>"
           if failed else "")
        + "".join(f"<p class=dim>note: {escape(n)}</p>" for n in t.notes)
    )


def _serving(s: dict[str, Any] | None, figs: dict[str, Path]) -> str:
    """The serving phase of the tuning, where a scenario asked for one: its table, its headline and
    the latency against offered load."""
    if s is None:
        return ""
    from rooftune.tuning.serving_table import SERVING_COLUMNS, serving_lines, serving_rows

    table = table_html(list(SERVING_COLUMNS), serving_rows(s), set(range(3, len(SERVING_COLUMNS)))) \
        if s["scenario"] != "single-stream" else ""
    return ("<h3>Serving</h3>" + table + "".join(f"<p>{escape(line)}</p>" for line in serving_lines(s))
            + figure_html(figs.get("serving"), "Latency against offered load: each setup's probes, the SLO and "
                          "each setup's largest rate within it"))


def _sensitivity(s: dict[str, Any] | None) -> str:
    """The int8 sensitivity pass of the tuning, where it ran: each layer's drop alone in int8
    beside its time, roofline position and expected int8 gain, and which layers the mixed set
    keeps at higher precision and why."""
    if s is None:
        return ""
    from rooftune.analysis.sensitivity_table import (
        NUMERIC_COLUMNS,
        SENSITIVITY_COLUMNS,
        sensitivity_rows,
        sensitivity_summary,
        sensitivity_title,
    )

    rows, _ = sensitivity_rows(s)
    numeric = {i for i, c in enumerate(SENSITIVITY_COLUMNS) if c in NUMERIC_COLUMNS}
    return (f"<h3>{escape(sensitivity_title(s))}</h3>"
            "<p>Each layer alone in int8 (the others in fp32), simulated on your data, most sensitive first; a layer "
            "stays at higher precision where its roofline position promises little from int8, or where its drop "
            "breaks the budget.</p>"
            + table_html(list(SENSITIVITY_COLUMNS), rows, numeric)
            + f"<p>{escape(sensitivity_summary(s))}</p>"
            + "".join(f"<p class=dim>note: {escape(n)}</p>" for n in s.get("notes", ())))


def _selection(r: OptimizeResult, figs: dict[str, Path]) -> str:
    s = r.select
    if s is None:
        return "<p class=dim>No primitive selection (see the steps).</p>"
    fell = {f["layer"]: f for f in s.verification.fallbacks}
    rows = [[c.layer, c.spec.describe(), c.primitive + (" -> default (failed verification)" if c.layer in fell else ""),
             time_text(c.time_s) + (" (extrapolated)" if c.extrapolated else "")] for c in s.selection.choices]
    cmp = [[f"selected vs {s.label(label)}", f"{c['speedup']:.3f}x", ci_text(c["ci"][0], c["ci"][1], 3),
            time_text(c["selected_s"]), time_text(c["other_s"])] for label, c in s.comparisons.items()]
    return (
        f"<p>{s.layers} convolutions, primitives chosen in {time_text(s.select_time_s)} ({escape(s.selection.strategy)}), "
        f"expected {time_text(s.selection.total_s)} of which {time_text(s.selection.conversion_s)} layout conversions. "
        f"The rewritten model runs in PyTorch eager; it is measured interleaved against the others in one process.</p>"
        + table_html(["comparison", "speedup", "95 % CI", "selected", "other"], cmp, {1, 2, 3, 4})
        + figure_html(figs.get("selection"), "Primitive chosen per convolution and its expected time")
        + f"<details><summary>Primitive per layer</summary>{table_html(['layer', 'spec', 'primitive', 'expected'], rows, {3})}</details>"
        + "".join(f"<p class=dim>note: {escape(n)}</p>" for n in s.notes)
    )


def _several_outputs(n: int) -> str:
    return f"; each of its {n} output tensors on its own scale, the figures the worst of them"


def _verification(r: OptimizeResult) -> str:
    rows = []
    if r.tune is not None and r.tune.best.ok:
        v = r.tune.best.verify
        rule = v.get("rule", "")
        if "inputs" in v:  # int8: the guard over the calibration set
            rule += (f" over {v['inputs']} calibration inputs: mean cosine {v.get('cosine', math.nan):.4f} "
                     f"(worst {v.get('min_cosine', math.nan):.4f}), top-1 agreement {v.get('top1', math.nan):.1%}")
        if v.get("outputs", 1) > 1:
            rule += _several_outputs(v["outputs"]) + (", top-1 agreement the first's" if "inputs" in v else "")
        rows.append(["tuned configuration", r.tune.best.describe(), "ok" if v.get("ok") else "FAILED",
                     f"{v.get('max_rel', math.nan):.2e}", f"{v.get('cosine', math.nan):.6f}", rule])
    if r.select is not None:
        v = r.select.verification
        rows.append(["selected primitives", f"{len(v.fallbacks)} layer(s) fell back to the default path",
                     "ok" if v.ok else "FAILED", f"{v.max_rel:.2e}", f"{v.cosine:.6f}",
                     f"max error <= {v.tolerance:g} of the output's scale"
                     + (_several_outputs(v.outputs) if v.outputs > 1 else "")])
    if not rows:
        return "<p class=dim>Nothing faster was found, so nothing needed verifying.</p>"
    return ("<p>Every faster variant was checked against the fp32 eager output of the same inputs before it could "
            "be reported.</p>" + table_html(["variant", "what", "check", "max error / scale", "cosine", "rule"], rows, {3, 4}))


def render(r: OptimizeResult, figs: dict[str, Path]) -> str:
    p = r.platform
    plat = (f"{escape(p.cpu_model)} ({escape(p.microarchitecture or 'unknown microarchitecture')}), {p.physical_cores} cores / "
            f"{p.logical_cores} CPUs, {p.usable_cores} usable; ISA {escape(' '.join(p.effective_isa))}; platform id "
            f"<code>{escape(p.id)}</code>; torch {escape(p.library_versions.get('torch'))}") if p is not None else "unknown"
    # the report's own step is still running while the page is written: the page is its result
    steps = table_html(["step", "status", "seconds", "message"],
                   [[s.name, s.status, f"{s.seconds:.1f}", s.message] for s in r.steps.values() if s.name != "report"], {2})
    banner = ("<p class=warn><b>Interrupted.</b> This report holds what finished before Ctrl-C; every measurement "
              "taken is in the store, and the same command continues the tuning where it stopped.</p>"
              if r.interrupted else "")
    failed = [s for s in r.steps.values() if s.status == "failed"]
    if failed:
        banner += "".join(f"<p class=warn>step {escape(s.name)} failed: {escape(s.message)}</p>" for s in failed)
    files = table_html(["what", "file"], [[k, v] for k, v in r.files.items()])
    cmds = "\n".join(escape(c) for c in r.commands)
    usage = r.usage()
    use = (f"<h2>Use the result</h2>\n<p>In your own program (Python):</p>\n<pre>{escape(chr(10).join(usage))}</pre>"
           if usage else "")
    notes = "".join(f"<pre>{escape(n)}</pre>" for n in r.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>rooftune: {escape(r.title)}</title><style>{CSS}</style></head>
<body>
<h1>rooftune optimize: {escape(r.title)}</h1>
<p class=dim>{escape(r.batch_text())}, objective {escape(r.objective)}, budget {r.budget_s:.0f} s, ran {r.duration_s:.0f} s before this report;
written {escape(datetime.now().strftime('%Y-%m-%d %H:%M'))}</p>
<p>{plat}</p>
{banner}
<p class=headline>{escape(r.headline())}</p>
{figure_html(figs.get("speedups"), "Every speedup of this run, measured interleaved, with its 95 % confidence interval")}
<h2>Steps</h2>{steps}
<h2>The machine</h2>{_machine(r, figs)}
<h2>The model on the roofline</h2>{_analysis(r, figs)}
<h2>Runtime configuration</h2>{_tuning(r, figs)}
<h2>Convolution primitives</h2>{_selection(r, figs)}
<h2>Verification</h2>{_verification(r)}
<h2>Reproduce</h2>
<p>The first command re-runs this report; the next two re-measure the tuned configuration and vanilla PyTorch, each
in a process started with its configuration's environment; the last redoes the primitive selection.</p>
<pre>{cmds}</pre>
{use}
<h2>Files</h2>{files}
{notes}
</body></html>
"""


def write_report(r: OptimizeResult) -> Path:
    """Figures, then ``report.html`` (written whole, then moved into place)."""
    figs = write_figures(r)
    from rooftune.fileio import write_atomic

    r.files["report"] = "report.html"
    return write_atomic(r.out / "report.html", render(r, figs))
