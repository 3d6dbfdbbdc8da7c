"""``rooftune analyze``: every op of a model on the measured roofline; ``rooftune models``: the
model names it takes."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from rooftune.cli.model_args import model_args
from rooftune.cli.options import (
    DataOpt,
    Db,
    Loss,
    MaxDrop,
    Metric,
    Optimizer,
    Train,
    Transform,
    batch_option,
    budget_option,
    device_option,
    input_option,
    json_option,
    model_option,
    parse_int_list,
    threads_option,
)
from rooftune.cli.printing import (
    Table,
    err,
    labelled,
    out,
    print_sensitivity,
    progress_reporter,
    rate_text,
    seconds_text,
)
from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text
from rooftune.paths import output_dir, output_file
from rooftune.units import fmt_size, threads_of
from rooftune.workload.data import data_spec


def _print_analysis(a: Any, top: int) -> None:
    from rooftune.workload.shapes import format_shape

    where = f"on {a.device}, " if a.device != "cpu" else ""
    out.print(
        f"[bold]{escape(a.model)}[/bold] ({a.workload_kind}), batch {a.batch}, "
        f"{where}{a.threads} thread{'s' if a.threads > 1 else ''}, "
        f"input {', '.join(format_shape(tuple(s)) for s in a.input_shapes)}; {len(a.ops)} ops captured by {a.capture}"
    )
    out.print(
        f"end-to-end [bold]{seconds_text(a.end_to_end_s)}[/bold] (IQR {seconds_text(a.end_to_end_iqr_s)}, {a.runs} runs); "
        f"sum of op times {seconds_text(a.ops_sum_s)} per run (median); each run of the ops against the end-to-end run "
        f"beside it: {a.accounting_ratio:.1%} of it (median, 95% CI {a.accounting_ci[0]:.1%}-{a.accounting_ci[1]:.1%}); "
        + (f"unattributed {seconds_text(a.between_ops_s)}" if a.between_ops_s is not None
           else "its interval reaches 100%: no time between ops measurable")
    )
    out.print(
        f"roofline lower bound [bold]{seconds_text(a.lower_bound_s)}[/bold]: efficiency {a.efficiency:.1%}; "
        f"{rate_text(a.flops, 'FLOP')}, {fmt_size(a.bytes)} compulsory, {rate_text(a.flops / a.end_to_end_s, 'FLOP/s')} attained"
    )
    out.print("time by bound (each op's median time, share of end-to-end): "
              + ", ".join(f"{k} {v:.0%}" for k, v in a.by_bound().items()))
    out.print("time by kind (the same):  "
              + ", ".join(f"{k['kind']} {k['share']:.0%}" for k in a.by_kind() if k["share"] >= 0.005))
    t = Table(title=f"Top {top} ops by time", title_justify="left")
    for col, just in (("op", "left"), ("kind", "left"), ("time", "right"), ("share", "right"),
                      ("GFLOP/s", "right"), ("bound", "left"), ("roof", "right"), ("headroom", "right")):
        t.add_column(col, justify=just)
    for o in sorted(a.ops, key=lambda o: -o.time_s)[:top]:
        t.add_row(
            o.module or o.name, o.kind, seconds_text(o.time_s), f"{o.time_s / a.end_to_end_s:.1%}",
            f"{o.attained_flops / 1e9:.1f}" if o.attained_flops else "-",
            o.bound, f"{o.efficiency:.0%}" if o.efficiency is not None else "-",
            seconds_text(o.headroom_s) if o.headroom_s is not None else "-",
        )
    out.print(t)
    out.print("[bold]Top opportunities[/bold] (headroom = measured - roofline lower bound; alike ops summed):")
    for i, g in enumerate(a.opportunity_groups(top), 1):
        who = f"{g['name']} ({g['module']})" if g["count"] == 1 else f"{g['count']} alike ops ({g['module']})"
        out.print(f" {i:2d}. {who}: {seconds_text(g['headroom_s'])} - {g['reason']}", markup=False, highlight=False)
    if a.phases_s:
        out.print(f"training step ({a.train['optimizer'] if a.train else 'sgd'}): {a.samples_per_s:.1f} samples/s; "
                  "by phase (median of the end-to-end runs; sum of its ops' median times): "
                  + ", ".join(f"{r['phase']} {seconds_text(r['time_s'])} ({r['share']:.0%}; ops {seconds_text(r['ops_time_s'])})"
                              for r in a.by_phase()))
    for w in a.warnings:
        labelled(err, "warning", "yellow", w)


def _print_trajectory(analyses: list[Any]) -> None:
    """Samples per second against batch size, where several batches were analysed."""
    batches = sorted({a.batch for a in analyses})
    if len(batches) < 2:
        return
    for threads in sorted({a.threads for a in analyses}):
        points = sorted((a.batch, a.samples_per_s) for a in analyses if a.threads == threads)
        out.print(f"trajectory ({threads_of(threads)}): samples/s against batch: "
                  + ", ".join(f"{b} -> {r:.1f}" for b, r in points), highlight=False)


def analyze(
    model: Annotated[str, typer.Argument(help="torchvision name (resnet50), lstm, gru, transformer-encoder, "
                                         "keras:NAME (keras:ResNet50), package.module:callable, a .pt2 or .keras file or a "
                                         "SavedModel directory.")],
    batch: Annotated[list[str] | None, batch_option("Batch size; several (1,8,32) draw a trajectory.")] = None,
    input_shape: Annotated[
        list[str] | None, input_option("Input shape, e.g. 1x3x224x224; repeat for several inputs.")
    ] = None,
    option: Annotated[
        list[str] | None, model_option("Model option KEY=VALUE (e.g. hidden=512 for lstm); repeatable.")
    ] = None,
    threads: Annotated[
        list[str] | None, threads_option("Intra-op threads; several (1,2) draw a trajectory (default all usable).")
    ] = None,
    top: Annotated[int, typer.Option("--top", help="How many ops and opportunities to list.")] = 10,
    json_out: Annotated[bool, json_option("the analysis")] = False,
    csv_path: Annotated[str | None, typer.Option("--csv", help="Write one row per op to FILE.")] = None,
    plot_dir: Annotated[str | None, typer.Option("--plot-dir", help="Write the roofline, time-based roofline and "
                                                 "trajectory figures to DIR.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="Figure format: png, svg or pdf.")] = "png",
    budget: Annotated[float, budget_option("Timing budget per analysis point, seconds.")] = 10.0,
    quick: Annotated[bool, typer.Option("--quick", help="Accept (or measure) quick ceilings.")] = False,
    db: Db = None,
    device: Annotated[str, device_option("cpu, or cuda / cuda:N: run the model there and place its ops on that "
                                         "device's roofline.")] = "cpu",
    train: Train = False,
    optimizer: Optimizer = None,
    loss: Loss = None,
    data: DataOpt = None,
    metric: Metric = None,
    max_drop: MaxDrop = None,
    transform: Transform = None,
) -> None:
    """Place every op of a model on the measured roofline and say where the time goes; with --data,
    each layer's sensitivity to int8 on your data beside its roofline position."""
    from pathlib import Path

    from rooftune.analysis import analyze as run_analysis
    from rooftune.analysis import write_csv
    from rooftune.analysis.findings import check_top
    from rooftune.report import plot_analysis
    from rooftune.report.figures import check_figure_format

    batches = parse_int_list(batch, "batch")
    thread_list = parse_int_list(threads, "thread count")
    args = model_args(input_shape, option, train=train, optimizer=optimizer, loss=loss)
    check_top(top, "--top")  # the library's rules, checked before anything is measured
    check_figure_format(fmt, "--format")
    if csv_path is not None:
        output_file(csv_path, "--csv")
    if plot_dir is not None:
        output_dir(plot_dir, "--plot-dir", parents=True)
    spec = data_spec(data, metric=metric, max_drop=max_drop, transform=transform)
    if spec is not None and args.train is not None:
        raise InvalidArgument("--data", spec.data, "allowed only without --train (int8 sensitivity is of inference)")
    progress, update = progress_reporter()
    with progress:
        analyses = run_analysis(
            model, batch=batches, inputs=args.shapes, options=args.options, threads=thread_list,
            budget_s=budget, quick=quick, db=db, progress=update, device=device, train=args.train,
        )
        if spec is not None:
            from rooftune.analysis.sensitivity import sensitivity

            update("int8 sensitivity per layer", 0, 1)
            sens = sensitivity(model, spec, inputs=args.shapes, options=args.options, analysis=analyses[0])
    written = []
    if csv_path:
        written.append(write_csv(analyses, csv_path))
    if plot_dir:
        Path(plot_dir).mkdir(parents=True, exist_ok=True)
        written += plot_analysis(analyses, plot_dir, fmt)
    if json_out:
        data: Any = analyses[0].to_dict(top) if len(analyses) == 1 else {
            "model": analyses[0].model, "points": [a.to_dict(top) for a in analyses]}
        if spec is not None:
            data["sensitivity"] = sens.to_dict()
        sys.stdout.write(json_text(data, indent=2) + "\n")
    else:
        for a in analyses:
            _print_analysis(a, top)
        _print_trajectory(analyses)
        if spec is not None:
            print_sensitivity(sens.to_dict())
        for p in written:
            out.print(f"wrote {p}", markup=False)


def models() -> None:
    """List the model names `rooftune analyze` accepts besides module:callable and .pt2 files."""
    from rooftune.workload import BUILTINS, zoo_names

    for name, b in BUILTINS.items():
        opts = ", ".join(f"{k}={v}" for k, v in b.defaults.items())
        out.print(f"[bold]{name}[/bold]: {b.description} (options {opts})", highlight=False)
    by_family: dict[str, list[str]] = {}
    for name, family in zoo_names().items():
        by_family.setdefault(family, []).append(name)
    for family, names in by_family.items():
        out.print(f"[bold]torchvision {family}[/bold]: {' '.join(sorted(names))}", highlight=False)
    from rooftune.workload import KERAS_APPLICATIONS

    out.print(f"[bold]keras applications[/bold] (TensorFlow, untrained, at their standard input size): "
              f"{' '.join('keras:' + n for n in KERAS_APPLICATIONS)}", highlight=False)
