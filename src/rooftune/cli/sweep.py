"""``rooftune sweep conv2d|lstm``: a kernel family over a grid of parameters on the time-based
roofline, with its findings, an optional report folder and a CSV/Parquet export."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from rooftune.cli.options import (
    Cluster,
    Db,
    JsonOut,
    batch_option,
    budget_option,
    device_option,
    parse_int_list,
    parse_names,
    threads_option,
)
from rooftune.cli.printing import Table, out, progress_reporter, seconds_text
from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text

VALUES_HELP = "a list (1,8,64) or a range (16:1024:*2, 8:64:+8)"


def _grid(shortcuts: dict[str, str | None], params: list[str] | None) -> dict[str, str]:
    grid = {name: value for name, value in shortcuts.items() if value is not None}
    for item in params or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InvalidArgument("--param", item, "expected NAME=VALUES, e.g. height=14,28 or stride=1,2")
        grid[name.strip()] = value.strip()
    return grid


def _print(result: Any) -> None:
    from rooftune.units import fmt_rate

    t = Table(title=f"{result.family} on {result.device} (platform {result.platform_id})", title_justify="left")
    for col in ("point", "pass", "precision", "variant", "time", "+-CI", "FLOP/s", "B/s", "bound", "of roof", "check"):
        t.add_column(col, justify="left" if col in ("point", "pass", "precision", "variant", "bound", "check")
                     else "right")
    from rooftune.sweep import get_family

    fam = get_family(result.family)
    for p in result.points:
        if not p.ok:
            t.add_row(fam.describe(p.params), p.pass_, p.precision, p.variant.label(), "-", "-", "-", "-", "failed", "-",
                      p.reason[:60])
            continue
        ci = f"{p.rel_ci * 100:.1f} %" if p.rel_ci is not None else "-"
        t.add_row(fam.describe(p.params), p.pass_, p.precision, p.variant.label(), seconds_text(p.median_s),
                  ci + (" !" if p.flagged else ""), fmt_rate(p.attained_flops, "FLOP/s"),
                  fmt_rate(p.attained_bandwidth, "B/s"), p.bound,
                  f"{p.efficiency * 100:.0f} %" if p.efficiency is not None else "-",
                  "ref" if p.error is None else f"{p.error:.1g}")
    out.print(t)
    state = "stopped by the budget (run the same command to continue)" if result.stopped_by_budget else "complete"
    out.print(f"{result.added} points run, {result.resumed} taken from the store, {len(result.skipped)} skipped; "
              f"{result.duration_s:.0f} s, {state}", markup=False, highlight=False)
    for line in result.findings:
        out.print(f"- {line}", markup=False, highlight=False)


def sweep(
    family: Annotated[str, typer.Argument(help="The kernel family: conv2d or lstm.")],
    batch: Annotated[str | None, batch_option(f"Batch sizes: {VALUES_HELP}.")] = None,
    channels: Annotated[str | None, typer.Option("--channels", help=f"conv2d: in and out channels, {VALUES_HELP}.")] = None,
    kernel: Annotated[str | None, typer.Option("--kernel", help=f"conv2d: kernel sizes, {VALUES_HELP}.")] = None,
    hidden: Annotated[str | None, typer.Option("--hidden", help=f"lstm: hidden sizes, {VALUES_HELP}.")] = None,
    seq_len: Annotated[str | None, typer.Option("--seq-len", help=f"lstm: sequence lengths, {VALUES_HELP}.")] = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="Any other parameter, NAME=VALUES; repeatable. conv2d: in_channels, out_channels, "
        "height, width, size, stride, padding, dilation, groups; lstm: input_size, layers, bidirectional.")] = None,
    passes: Annotated[list[str] | None, typer.Option("--pass", help="fwd (default), bwd, step; e.g. fwd,bwd,step.")] = None,
    precision: Annotated[list[str] | None, typer.Option(
        "--precision", help="fp32,bf16 by default; also fp16, int8 (CPU) or tf32 (CUDA); a precision the machine "
        "lacks is skipped with the reason.")] = None,
    algorithm: Annotated[list[str] | None, typer.Option(
        "--algorithm", help="default (the framework's), rooftune's primitive names, or all.")] = None,
    layout: Annotated[list[str] | None, typer.Option("--layout", help="conv2d: NCHW,NHWC (both by default).")] = None,
    threads: Annotated[list[str] | None, threads_option("Thread counts, e.g. 1,2 (default: all usable cores).")] = None,
    device: Annotated[str, device_option("cpu, or cuda / cuda:N: sweep on that GPU (cuDNN autotuning off/on, "
                                         "eager and CUDA-graph launch).")] = "cpu",
    budget: Annotated[float, budget_option("Seconds; the sweep stops between points and resumes when run "
                                           "again.")] = float("inf"),
    point_budget: Annotated[float, typer.Option("--point-budget", help="Seconds of timing per point.")] = 0.6,
    report: Annotated[str | None, typer.Option("--report", help="Folder for figures (PNG, SVG) and a "
                                               "self-contained report.html.")] = None,
    export: Annotated[str | None, typer.Option("--export", help="Write every stored point of this family and "
                                               "platform to a .csv (or .parquet with pyarrow).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Use (or measure) quick ceilings.")] = False,
    confirm: Annotated[bool, typer.Option("--confirm/--no-confirm", help="Measure the speedups the findings state "
                                          "again, interleaved (CPU).")] = True,
    json_out: JsonOut = False,
    db: Db = None,
    cluster: Cluster = None,
) -> None:
    """Sweep a kernel family (conv2d, lstm) over its parameters on the time-based roofline, on this
    machine or on every platform of a Ray cluster's nodes."""
    from rooftune.paths import output_dir, output_file
    from rooftune.sweep import sweep as run_sweep
    from rooftune.sweep.export import FORMATS

    grid = _grid({"batch": batch, "channels": channels, "kernel": kernel, "hidden": hidden, "seq_len": seq_len}, param)
    if export is not None:
        output_file(export, "--export", FORMATS)
    if report is not None:
        output_dir(report, "--report")
    progress_ctx, update = progress_reporter()
    with progress_ctx:
        result = run_sweep(
            family, grid or None, passes=parse_names(passes, "--pass", "fwd,bwd"),
            precisions=parse_names(precision, "--precision", "fp32,bf16"),
            algorithms=parse_names(algorithm, "--algorithm", "default,onednn-nhwc"),
            layouts=parse_names(layout, "--layout", "NCHW,NHWC"), threads=parse_int_list(threads, "--threads"),
            device=device, budget_s=budget, point_budget_s=point_budget, quick=quick, db=db, confirm=confirm,
            progress=lambda done, total, point: update("sweep points", done, total), cluster=cluster)
    # on a cluster one result per platform, each from the shared store as a sweep of one machine of it
    results = list(result.results.values()) if cluster is not None else [result]
    if export is not None:
        from rooftune.store import Store
        from rooftune.sweep import SweepPoint
        from rooftune.sweep.export import export as write_export

        with Store(db) as store:
            stored = [SweepPoint.from_dict(d) for r in results for d in store.sweep_points(r.platform_id, r.family)]
            path = write_export(stored, store.fingerprints(), export)
        if not json_out:
            out.print(f"exported {len(stored)} points: {path}", markup=False, highlight=False)
    if report is not None:
        from pathlib import Path

        from rooftune.report.sweep_report import write_sweep_report

        for r in results:  # (a platform's report in a folder of its own when a cluster has several)
            page = write_sweep_report(r, Path(report) / r.platform_id if len(results) > 1 else report)
            if not json_out:
                out.print(f"report: {page}", markup=False, highlight=False)
    if json_out:
        sys.stdout.write(json_text(result.to_dict(), indent=2, default=str) + "\n")
    else:
        for r in results:
            _print(r)
