"""The ``rooftune`` command: parses, calls the public API, prints with Rich. Nothing else."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table as _RichTable
from rich.text import Text

from rooftune.errors import InvalidArgument, RooftuneError
from rooftune.paths import output_dir, output_file
from rooftune.units import ci_text, fmt_rate, fmt_size, threads_of

if TYPE_CHECKING:
    from rooftune.machine import Ceilings
    from rooftune.machine.gpu import GpuCeilings

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Why does my deep-learning model run this fast on this machine, and how do I make it faster?",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
#: Columns of what is written to a file or a pipe, where there is no terminal to fit (Rich would
#: take 80 and cut table cells short); COLUMNS, when set, still decides.
PLAIN_WIDTH = 160
out = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PLAIN_WIDTH)
err = Console(stderr=True)


class Table(_RichTable):
    """A Rich table whose cells fold onto more lines on a narrow terminal instead of being cut
    short ('onnxrun…', '911.7 …'), so nothing a table reports is lost at any width. Its title and
    cells are plain text, never Rich markup: they hold layer names, configurations, errors and
    model names, any of which may have brackets in it (a styled cell is given as a Text)."""

    def __init__(self, *args: Any, title: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, title=Text(title, style="table.title") if isinstance(title, str) else title, **kwargs)

    def add_column(self, *args: Any, overflow: Any = "fold", **kwargs: Any) -> None:
        super().add_column(*args, overflow=overflow, **kwargs)

    def add_row(self, *cells: Any, **kwargs: Any) -> None:
        super().add_row(*(Text(c) if isinstance(c, str) else c for c in cells), **kwargs)


def _labelled(console: Console, label: str, style: str, message: object) -> None:
    """``label: message`` on one line, the label styled and the message printed as it is: a
    message carries what the user gave (a model name, a path, an option's value), which Rich must
    not read as markup (``net[/x]`` would end in a MarkupError, ``[bold]`` restyle the line)."""
    console.print(Text.assemble((f"{label}:", style), " ", str(message)), highlight=False, soft_wrap=True)


def _parse_names(value: str | None, name: str, example: str, what: str = "names") -> list[str] | None:
    """A comma-separated list given on the command line; None when the option was not given,
    refused when it was given empty (``--precision ''`` must not mean "all of them")."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise InvalidArgument(name, value, f"expected {what} separated by commas with none empty, e.g. {example}")
    return items


def _parse_int_list(value: str | None, name: str) -> list[int] | None:
    items = _parse_names(value, name, "1,2", what="integers")
    if items is None:
        return None
    bad = next((v for v in items if not v.lstrip("+-").isdecimal()), None)
    if bad is not None:
        raise InvalidArgument(name, bad, "expected integers separated by commas, e.g. 1,2")
    return [int(v) for v in items]


def _rate(v: float, unit: str) -> str:
    return fmt_rate(v, unit, decimals=1)


#: How often a step that goes on (a search, a campaign) is reported again as a line of its own
#: when stderr is a file or a pipe.
PLAIN_EVERY_S = 30.0


class _Lines:
    """Progress as plain lines on stderr, where a bar or a spinner would be noise (a file, a pipe,
    a CI log): a line when a step starts, and one every ``every_s`` while it goes on, each led by
    the minutes and seconds since the command started. ``first`` (a spinner's message) comes
    before the first step's line: not before, so that input refused before any step began stays
    a one-line error; ``at_once``: on entering, for a step that reports nothing while it runs
    and follows every check of the input."""

    def __init__(self, first: str | None = None, every_s: float = PLAIN_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, at_once: bool = False) -> None:
        self.first, self.every_s, self.clock, self.at_once = first, every_s, clock, at_once
        self.started = clock()
        self.step: str | None = None
        self.at = -math.inf

    def __enter__(self) -> _Lines:
        if self.at_once:
            self._say_first()
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _say_first(self) -> None:
        if self.first:
            first, self.first = self.first, None
            self.update(first)

    def update(self, step: str, done: int = 0, total: int = 0) -> None:
        self._say_first()
        now = self.clock()
        if step == self.step and now - self.at < self.every_s:
            return
        self.step, self.at = step, now
        s = int(now - self.started)
        count = f" ({done}/{total})" if total > 1 else ""
        err.print(f"{s // 60}:{s % 60:02d} {step}{count}", markup=False, highlight=False, soft_wrap=True)


class _Spinner:
    """Rich's spinner, its messages shown as plain text (they may name a model or a file)."""

    def __init__(self, first: str) -> None:
        self.status = err.status(Text(first))

    def __enter__(self) -> _Spinner:
        self.status.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.status.__exit__(*exc)

    def update(self, message: str) -> None:
        self.status.update(Text(message))


def _status(first: str, at_once: bool = False) -> Any:
    """A spinner with a message on a terminal (``.update(message)``), else :class:`_Lines`."""
    return _Spinner(first) if err.is_terminal else _Lines(first, at_once=at_once)


def _progress() -> tuple[Any, Any]:
    """A context and ``update(step, done, total)``: Rich's transient bars on a terminal, else
    :class:`_Lines`."""
    if not err.is_terminal:
        lines = _Lines()
        return lines, lines.update

    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),  # a step may name a model or a file
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def update(step: str, done: int, total: int) -> None:
        if step not in tasks:
            tasks[step] = progress.add_task(step, total=total)
        progress.update(tasks[step], completed=done, total=total)

    return progress, update


def _print_ceilings(c: Any) -> None:
    p = c.platform
    quota = f", CPU quota {p.cpu_quota:g}" if p.cpu_quota is not None else ""
    out.print(
        f"[bold]{escape(p.cpu_model)}[/bold] ({p.microarchitecture or 'unknown microarchitecture'}), "
        f"{p.physical_cores} cores / {p.logical_cores} CPUs, usable {p.usable_cores}{quota}; "
        f"ISA {' '.join(p.effective_isa)}" + (f" (capped at {p.isa_cap})" if p.isa_cap else "")
    )
    out.print(f"platform id [bold]{p.id}[/bold]; OpenMP {((p.openmp or {}).get('library')) or 'none'}; "
              f"torch {p.library_versions.get('torch')}, oneDNN {p.library_versions.get('onednn')}, "
              f"MKL {p.library_versions.get('mkl')}")
    _print_measured(c)

    t = Table(title="Peak compute (FLOP/s; int8: ops/s)", title_justify="left")
    if len(c.threads) <= 3:  # one row per roof, one column per thread count
        t.add_column("roof")
        for n in c.threads:
            t.add_column(f"{n} thread{'s' if n > 1 else ''}", justify="right")
        for name, per in c.peak_flops_per_thread.items():
            t.add_row(name, *[_rate(per.get(n, float("nan")), "FLOP/s") for n in c.threads])
        for name in c.skipped:
            t.add_row(name, *["skipped" for _ in c.threads])
    else:  # more thread counts than fit across: one row per count
        t.add_column("threads", justify="right")
        for name in c.peak_flops_per_thread:
            t.add_column(name, justify="right")
        for n in c.threads:
            t.add_row(str(n), *[_rate(per.get(n, float("nan")), "") for per in c.peak_flops_per_thread.values()])
    out.print(t)
    for name, reason in c.skipped.items():
        out.print(Text(f"{name} skipped: {reason}", style="dim"))

    out.print(_bandwidth_table(c, f"Memory bandwidth on {c.max_threads} threads (bytes/s)", c.capacity_bytes))
    out.print(f"dispatch overhead (one tiny torch op): [bold]{c.dispatch_overhead_s * 1e6:.2f} us[/bold]")
    for w in c.warnings:
        _labelled(err, "warning", "yellow", w)


def _print_measured(c: Any, steps_shown: int | None = None) -> None:
    """When the ceilings were measured, from the store or now, and where a run's time went."""
    when = datetime.fromtimestamp(c.measured_at).strftime("%Y-%m-%d %H:%M")
    if c.from_store:
        out.print(f"[dim]from the store, measured {when}{' (quick)' if c.quick else ''}; --refresh re-measures[/dim]")
        return
    steps = sorted((c.details.get("step_s") or {}).items(), key=lambda kv: -kv[1])[:steps_shown]
    spent = "; " + ", ".join(f"{name} {s:.1f} s" for name, s in steps) if steps else ""
    out.print(f"[dim]measured {when} in {c.duration_s:.1f} s{' (quick)' if c.quick else ''}{spent}[/dim]",
              highlight=False)


def _bandwidth_table(c: Any, title: str, capacity: dict[str, int]) -> Any:
    """The ceiling of each memory level and what each sweep kernel reached there."""
    b = Table(title=title, title_justify="left")
    b.add_column("level")
    b.add_column("capacity", justify="right")
    b.add_column("ceiling", justify="right")
    kernels = list(c.bandwidth_by_kernel)
    for k in kernels:
        b.add_column(k, justify="right")
    for level, bw in c.bandwidth.items():
        cap = capacity.get(level)
        b.add_row(level, fmt_size(cap) if cap else "-", _rate(bw, "B/s"),
                  *[_rate(c.bandwidth_by_kernel[k][level], "B/s") if level in c.bandwidth_by_kernel[k] else "-"
                    for k in kernels])
    return b


def _print_gpu_ceilings(c: Any) -> None:
    d = c.platform
    clocks = d.max_clocks_mhz
    out.print(f"[bold]{escape(d.name)}[/bold] ({d.arch}), {d.multiprocessors} multiprocessors, {fmt_size(d.memory_bytes)} "
              f"of memory, {fmt_size(d.l2_bytes)} of L2"
              + (f"; clocks up to {clocks['sm']} MHz (SM), {clocks['memory']} MHz (memory)" if clocks else ""))
    v = d.library_versions
    out.print(f"device id [bold]{d.id}[/bold] on host {d.host_id} ({d.host_cpu}); torch {v.get('torch')}, "
              f"CUDA {v.get('cuda')}, Triton {v.get('triton') or 'missing'}, driver {v.get('driver') or 'unknown'}",
              highlight=False)
    _print_measured(c, steps_shown=4)
    t = Table(title="Peak compute on the device (FLOP/s; int8: ops/s)", title_justify="left")
    t.add_column("roof")
    t.add_column("rate", justify="right")
    t.add_column("what", justify="left")
    errors = c.details.get("gemm_relative_error", {})
    for name, rate in c.peak_flops.items():
        what = ("vector FMA microkernel (Triton)" if not name.startswith("gemm_")
                else f"torch matrix product {c.details.get('gemm_size')}^3, error {errors.get(name[5:], float('nan')):.1g}")
        t.add_row(name, _rate(rate, "FLOP/s"), what)
    for name in c.skipped:
        if name != "bandwidth":  # the sweep is no roof; its reason is printed below
            t.add_row(name, "skipped", "")
    out.print(t)
    for name, reason in c.skipped.items():
        out.print(Text(f"{name} skipped: {reason}", style="dim"))
    out.print(_bandwidth_table(c, "Memory bandwidth on the device (bytes/s)",
                               {**c.capacity_bytes, "DRAM": d.memory_bytes}))
    out.print(f"dispatch overhead (one tiny torch op in a stream of them): [bold]{c.dispatch_overhead_s * 1e6:.2f} us"
              f"[/bold]; one op waited for: {c.launch_latency_s * 1e6:.2f} us")
    for w in c.warnings:
        _labelled(err, "warning", "yellow", w)


@app.command()
def machine(
    json_out: Annotated[bool, typer.Option("--json", help="Print the ceilings as one JSON object.")] = False,
    plot: Annotated[str | None, typer.Option("--plot", help="Draw the roofline to FILE (.png, .svg, .pdf).")] = None,
    plot_sweep: Annotated[
        str | None, typer.Option("--plot-sweep", help="Draw the bandwidth sweep and its plateaus to FILE.")
    ] = None,
    threads: Annotated[
        str | None, typer.Option("--threads", help="Thread counts to measure, e.g. 1,2 (default 1..usable cores).")
    ] = None,
    precision: Annotated[
        str | None, typer.Option("--precision", help="Precisions: fp32,fp64,bf16,int8 (default all); on a CUDA "
                                 "device fp32,fp64,tf32,fp16,bf16,int8,fp8.")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer sweep points, shorter measurements (< 8 s).")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Measure again even if the store has ceilings.")] = False,
    db: Annotated[
        str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL (default $ROOFTUNE_DB or the user data dir).")
    ] = None,
    device: Annotated[
        str, typer.Option("--device", help="cpu, or cuda / cuda:N for the roofline of a CUDA device.")
    ] = "cpu",
) -> None:
    """Measure the machine's roofline: peak FLOP/s, bandwidth of every memory level, dispatch overhead."""
    from rooftune.machine import get_ceilings, validate_precisions
    from rooftune.platform.gpu import parse_device
    from rooftune.report import check_figure_path, plot_roofline
    from rooftune.report import plot_sweep as draw_sweep

    kind, index = parse_device(device)
    thread_list = _parse_int_list(threads, "thread count")
    precisions = _parse_names(precision, "--precision", "fp32,fp64")
    if kind == "cuda":
        from rooftune.machine.gpu import validate_gpu_precisions

        if thread_list:
            raise InvalidArgument("--threads", threads, "applies to --device cpu only (a CUDA device's "
                                  "ceilings are measured on the whole device)")
        validate_gpu_precisions(precisions)
    else:
        validate_precisions(precisions)
    plot_path = check_figure_path(plot, "--plot") if plot is not None else None
    sweep_path = check_figure_path(plot_sweep, "--plot-sweep") if plot_sweep is not None else None
    if kind == "cuda":  # here, to name the value as the user wrote it
        from rooftune.machine.gpu import get_gpu_ceilings
        from rooftune.platform.gpu import check_cuda

        check_cuda(index or 0, device)
    progress, update = _progress()
    c: Ceilings | GpuCeilings
    with progress:
        if kind == "cuda":
            c = get_gpu_ceilings(index or 0, precisions=precisions, quick=quick, refresh=refresh, db=db,
                                 progress=update)
        else:
            c = get_ceilings(
                threads=thread_list, precisions=precisions, quick=quick, refresh=refresh, db=db, progress=update
            )
    if plot_path:
        plot_roofline(c, plot_path)
    if sweep_path:
        draw_sweep(c, sweep_path)
    if json_out:
        sys.stdout.write(json.dumps(c.to_dict(), indent=2) + "\n")
    else:
        (_print_gpu_ceilings if kind == "cuda" else _print_ceilings)(c)
        for p in (plot_path, sweep_path):
            if p:
                out.print(f"wrote {p}", markup=False)


def _seconds(t: float) -> str:
    if abs(t) >= 1:
        return f"{t:.2f} s"
    if abs(t) >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def _print_analysis(a: Any, top: int) -> None:
    from rooftune.workload.shapes import format_shape

    where = f"on {a.device}, " if a.device != "cpu" else ""
    out.print(
        f"[bold]{escape(a.model)}[/bold] ({a.workload_kind}), batch {a.batch}, {where}{a.threads} thread{'s' if a.threads > 1 else ''}, "
        f"input {', '.join(format_shape(tuple(s)) for s in a.input_shapes)}; {len(a.ops)} ops captured by {a.capture}"
    )
    out.print(
        f"end-to-end [bold]{_seconds(a.end_to_end_s)}[/bold] (IQR {_seconds(a.end_to_end_iqr_s)}, {a.runs} runs); "
        f"sum of op times {_seconds(a.ops_sum_s)} per run (median); each run of the ops against the end-to-end run "
        f"beside it: {a.accounting_ratio:.1%} of it (median, 95% CI {a.accounting_ci[0]:.1%}-{a.accounting_ci[1]:.1%}); "
        + (f"unattributed {_seconds(a.between_ops_s)}" if a.between_ops_s is not None
           else "its interval reaches 100%: no time between ops measurable")
    )
    out.print(
        f"roofline lower bound [bold]{_seconds(a.lower_bound_s)}[/bold]: efficiency {a.efficiency:.1%}; "
        f"{_rate(a.flops, 'FLOP')}, {fmt_size(a.bytes)} compulsory, {_rate(a.flops / a.end_to_end_s, 'FLOP/s')} attained"
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
            o.module or o.name, o.kind, _seconds(o.time_s), f"{o.time_s / a.end_to_end_s:.1%}",
            f"{o.attained_flops / 1e9:.1f}" if o.attained_flops else "-",
            o.bound, f"{o.efficiency:.0%}" if o.efficiency is not None else "-",
            _seconds(o.headroom_s) if o.headroom_s is not None else "-",
        )
    out.print(t)
    out.print("[bold]Top opportunities[/bold] (headroom = measured - roofline lower bound; alike ops summed):")
    for i, g in enumerate(a.opportunity_groups(top), 1):
        who = f"{g['name']} ({g['module']})" if g["count"] == 1 else f"{g['count']} alike ops ({g['module']})"
        out.print(f" {i:2d}. {who}: {_seconds(g['headroom_s'])} - {g['reason']}", markup=False, highlight=False)
    for w in a.warnings:
        _labelled(err, "warning", "yellow", w)


@app.command()
def analyze(
    model: Annotated[str, typer.Argument(help="torchvision name (resnet50), lstm, gru, transformer-encoder, package.module:callable or a .pt2 file.")],
    batch: Annotated[str | None, typer.Option("--batch", help="Batch size; several (1,8,32) draw a trajectory.")] = None,
    input_shape: Annotated[
        list[str] | None, typer.Option("--input", help="Input shape, e.g. 1x3x224x224; repeat for several inputs.")
    ] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="Model option KEY=VALUE (e.g. hidden=512 for lstm); repeatable.")
    ] = None,
    threads: Annotated[
        str | None, typer.Option("--threads", help="Intra-op threads; several (1,2) draw a trajectory (default all usable).")
    ] = None,
    top: Annotated[int, typer.Option("--top", help="How many ops and opportunities to list.")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="Print the analysis as one JSON object.")] = False,
    csv_path: Annotated[str | None, typer.Option("--csv", help="Write one row per op to FILE.")] = None,
    plot_dir: Annotated[str | None, typer.Option("--plot-dir", help="Write the roofline, time-based roofline and trajectory figures to DIR.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="Figure format: png, svg or pdf.")] = "png",
    budget: Annotated[float, typer.Option("--budget", help="Timing budget per analysis point, seconds.")] = 10.0,
    quick: Annotated[bool, typer.Option("--quick", help="Accept (or measure) quick ceilings.")] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
    device: Annotated[
        str, typer.Option("--device", help="cpu, or cuda / cuda:N: run the model there and place its ops on that device's roofline.")
    ] = "cpu",
) -> None:
    """Place every op of a model on the measured roofline and say where the time goes."""
    from pathlib import Path

    from rooftune.analysis import analyze as run_analysis
    from rooftune.analysis import write_csv
    from rooftune.report import FIGURE_FORMATS, plot_analysis
    from rooftune.workload import parse_options, parse_shape

    batches = _parse_int_list(batch, "batch")
    thread_list = _parse_int_list(threads, "thread count")
    shapes = [parse_shape(s) for s in input_shape or []]
    options = parse_options(option or [])
    if top < 1:
        raise InvalidArgument("--top", top, "allowed a positive integer")
    if f".{fmt}" not in FIGURE_FORMATS:
        raise InvalidArgument("--format", fmt, f"allowed {', '.join(f[1:] for f in FIGURE_FORMATS)}")
    if csv_path is not None:
        output_file(csv_path, "--csv")
    if plot_dir is not None:
        output_dir(plot_dir, "--plot-dir", parents=True)
    progress, update = _progress()
    with progress:
        analyses = run_analysis(
            model, batch=batches, inputs=shapes or None, options=options, threads=thread_list,
            budget_s=budget, quick=quick, db=db, progress=update, device=device,
        )
    written = []
    if csv_path:
        written.append(write_csv(analyses, csv_path))
    if plot_dir:
        Path(plot_dir).mkdir(parents=True, exist_ok=True)
        written += plot_analysis(analyses, plot_dir, fmt)
    if json_out:
        data: Any = analyses[0].to_dict(top) if len(analyses) == 1 else {
            "model": analyses[0].model, "points": [a.to_dict(top) for a in analyses]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        for a in analyses:
            _print_analysis(a, top)
        for p in written:
            out.print(f"wrote {p}", markup=False)


@app.command()
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


def _fmt_latency(t: Any) -> str:
    return _seconds(t) if isinstance(t, float) and t == t else "-"


def _print_tune(r: Any) -> None:
    out.print(f"[bold]{escape(r.model)}[/bold], objective {r.objective}, {r.batch_text()}: {len(r.trials)} trials "
              f"({sum(1 for t in r.trials if not t.ok)} failed, {r.resumed} from the store) in {r.duration_s:.0f} s")
    from rooftune.tuning.table import TUNE_COLUMNS, guard_lines, tune_rows

    t = Table(title="Configurations (p50 and samples/s from the interleaved comparisons where compared; "
                    "speedup of the best, interleaved, 95% CI)", title_justify="left")
    for col in TUNE_COLUMNS:
        t.add_column(col, justify="left" if col in ("name", "configuration", "precision") else "right")
    for row in tune_rows(r):
        t.add_row(*row)
    out.print(t)
    for line in (*r.headline_lines(), r.reversal_line(), r.unsteady_line(), r.drift_line()):
        if line:
            out.print(line, markup=False, highlight=False)
    for line in guard_lines(r):
        out.print(line, markup=False, highlight=False)
    standing = r.guideline_text()
    if standing:
        out.print(f"guideline: {standing}; " + "; ".join(r.guideline_reasons), markup=False, highlight=False)
    if r.time_line():
        out.print(r.time_line(), markup=False, highlight=False)
    for n in r.notes:
        _labelled(err, "note", "yellow", n)


@app.command()
def tune(
    model: Annotated[str, typer.Argument(help="A model as `rooftune analyze` takes it.")],
    objective: Annotated[str, typer.Option("--objective", help="latency (p50 per inference) or throughput (samples/s).")] = "latency",
    budget: Annotated[float, typer.Option("--budget", help="Seconds for the whole study; the guideline, the baselines and their comparisons with the best are measured whatever it is (about 1-2 minutes on a 2-core machine).")] = 240.0,
    trials: Annotated[int | None, typer.Option("--trials", help="At most this many searched trials.")] = None,
    batch: Annotated[int | None, typer.Option("--batch", help="Batch size.")] = None,
    input_shape: Annotated[list[str] | None, typer.Option("--input", help="Input shape; repeatable.")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="Model option KEY=VALUE.")] = None,
    guidelines_only: Annotated[bool, typer.Option("--guidelines-only", help="No search: the guideline (in each precision allowed) and the baselines only.")] = False,
    runtime: Annotated[str | None, typer.Option("--runtime", help="Restrict the search to these runtimes, e.g. eager,onnxruntime.")] = None,
    fp32: Annotated[bool, typer.Option("--fp32", help="Search fp32 only (by default bf16 too where the CPU has it natively and a peer runs it by default).")] = False,
    bf16: Annotated[bool, typer.Option("--bf16", help="Search bf16 (native bf16 CPUs only; the default where a peer runs it).")] = False,
    int8: Annotated[bool, typer.Option("--int8", help="Also search int8 (post-training static quantization; guard: cosine >= 0.99, top-1 >= 99%).")] = False,
    calibration: Annotated[int | None, typer.Option("--calibration", help="Inputs in the int8 calibration set (default 32).")] = None,
    validate: Annotated[str | None, typer.Option("--validate", help="module:function(outputs, references) -> bool, in place of the built-in guard.")] = None,
    save: Annotated[str | None, typer.Option("--save", help="Write the best configuration to FILE (JSON), its artifact beside it.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
) -> None:
    """Tune the runtime configuration of a model, against vanilla PyTorch and the vendor defaults."""
    from rooftune.tuning import precisions_for
    from rooftune.tuning import tune as run_tune
    from rooftune.workload import parse_options, parse_shape

    shapes = [parse_shape(s) for s in input_shape or []]
    options = parse_options(option or [])
    runtimes = _parse_names(runtime, "--runtime", "eager,onnxruntime")
    if save is not None:
        output_file(save, "--save")
    progress, update = _progress()
    with progress:
        r = run_tune(model, objective=objective, budget_s=budget, trials=trials, batch=batch, inputs=shapes or None,
                     options=options, guidelines_only=guidelines_only,
                     precisions=precisions_for(fp32=fp32, bf16=bf16, int8=int8, runtimes=runtimes),
                     runtimes=runtimes, db=db, save=save, progress=update, validate=validate, calibration_size=calibration)
    if json_out:
        sys.stdout.write(json.dumps(r.to_dict(), indent=2, default=str) + "\n")
    else:
        _print_tune(r)
        if save:
            out.print(f"wrote {save}", markup=False)
            _print_load_hint(save)


def _print_load_hint(path: Any) -> None:
    """How to run a saved configuration in one's own program, in one line."""
    out.print(f"in your program: rooftune.load_tuned({str(path)!r}), started by "
              f"rooftune exec --config {shlex.quote(str(path))} -- ...", markup=False, highlight=False, soft_wrap=True)


def _print_profile(result: Any, summary: list[dict[str, Any]]) -> None:
    from rooftune.bench.canary import slow_host_warning, steal_warning
    from rooftune.profiling.campaign import CONFIRM

    c = result
    state = "stopped by the budget (run the same command to continue)" if c.stopped_by_budget else "complete"
    again = f", {c.retimed} timed again in passes 2-{c.passes + c.extra_run}" if c.passes > 1 else ""
    if c.extra_run:
        again += f" ({c.extra_run} confirmation pass{'es' if c.extra_run > 1 else ''} over unconfirmed rows)"
    if c.waited_s >= 0.5:
        again += f", {c.waited_s:.0f} s spent waiting for quiet stretches"
    if c.counts.get("ok", 0):
        again += f"; {c.quiet_rows} rows timed at least once while the machine was quiet"
    if c.passes > 1 and c.unconfirmed:
        again += f"; {c.unconfirmed} rows' fastest pass not confirmed by a quiet pass within {(CONFIRM - 1) * 100:.0f} %"
    stolen = steal_warning(c.steal_share, "the campaign")
    if stolen:
        again += f"; {stolen}"
    slow = slow_host_warning(c.probe_median, c.probe_quiet_share)
    if slow:
        again += f"; {slow}"
    out.print(f"campaign on platform {c.platform_id}: {c.added} rows added, {c.skipped} already stored; "
              f"{c.counts.get('ok', 0)} timed, {c.counts.get('unsupported', 0)} unsupported, "
              f"{c.counts.get('failed', 0)} failed{again}; {c.duration_s:.0f} s, {state}", markup=False, highlight=False)
    if not summary:
        return
    t = Table(title="Per-layer fastest primitive against pytorch-default (F.conv2d)", title_justify="left")
    for col in ("model", "threads", "layers", "default", "per-layer best", "speedup", "winners (layers)"):
        t.add_column(col, justify="left" if col in ("model", "winners (layers)") else "right")
    for r in summary:
        wins = ", ".join(f"{k} {v}" for k, v in r["wins"].items())
        t.add_row(r["model"], str(r["threads"]), f"{r['profiled']}/{r['layers']}", _seconds(r["baseline_s"]),
                  _seconds(r["best_s"]), f"{r['speedup']:.2f}x", wins)
    out.print(t)


def _check_primitives(json_out: bool) -> None:
    from rooftune.primitives import all_primitives
    from rooftune.primitives.check import selftest

    verdicts = selftest()
    per: dict[str, dict[str, int]] = {}
    for v in verdicts:
        per.setdefault(v.primitive, {"ok": 0, "unsupported": 0, "failed": 0})[v.status] += 1
    failed = [v for v in verdicts if v.status == "failed"]
    if json_out:
        sys.stdout.write(json.dumps({"primitives": per, "failed": [
            {"primitive": v.primitive, "spec": v.spec.describe(), "reason": v.reason} for v in failed]}, indent=2) + "\n")
    else:
        t = Table(title="Primitives against F.conv2d (fp64) on the check specs", title_justify="left")
        for col in ("primitive", "library", "layout", "verified", "unsupported", "failed"):
            t.add_column(col, justify="left" if col in ("primitive", "library", "layout") else "right")
        for p in all_primitives():
            c = per.get(p.name, {})
            t.add_row(p.name, p.library, f"{p.in_layout}->{p.out_layout} {p.precision}", str(c.get("ok", 0)),
                      str(c.get("unsupported", 0)), str(c.get("failed", 0)))
        out.print(t)
        for v in failed:
            _labelled(err, "failed", "red", f"{v.primitive} on {v.spec.describe()}: {v.reason}")
    if failed:
        raise typer.Exit(1)


@app.command()
def profile(
    models: Annotated[str | None, typer.Option("--models", help="Profile every convolution of these models, e.g. resnet50,mobilenet_v2.")] = None,
    sample: Annotated[int, typer.Option("--sample", help="Also profile N specs sampled (Sobol) over realistic ranges.")] = 0,
    batch: Annotated[str, typer.Option("--batch", help="Batch sizes, e.g. 1,8.")] = "1",
    threads: Annotated[str | None, typer.Option("--threads", help="Thread counts, e.g. 1,2 (default: all usable cores).")] = None,
    primitives: Annotated[str | None, typer.Option("--primitives", help="Only these primitives (default: all).")] = None,
    int8: Annotated[bool, typer.Option("--int8", help="Also profile every spec in int8 (the int8 primitives).")] = False,
    budget: Annotated[float, typer.Option("--budget", help="Seconds; the campaign stops between specs and resumes when run again.")] = 3600.0,
    passes: Annotated[int, typer.Option("--passes", help="Time every row in this many passes over the whole campaign; each row keeps its fastest (1..10).")] = 3,
    extra_passes: Annotated[int, typer.Option("--extra-passes", help="Then time again, in up to this many more passes, the rows whose fastest pass no pass timed on a quiet machine confirmed within 3 %, each once the machine reads quiet (0..10).")] = 3,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**32 - 1, help="Seed of the sampled specs.")] = 0,
    isa_variant: Annotated[str | None, typer.Option("--isa-variant", help="Run capped to an ISA (avx, avx2, avx512): an emulated platform of its own.")] = None,
    summary: Annotated[bool, typer.Option("--summary", help="Print per-model winners and the per-layer best against F.conv2d.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Only verify every primitive against F.conv2d on the shipped check specs.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
) -> None:
    """Profile convolution primitives per layer on this machine (resumable campaign)."""
    if check:
        given = [flag for flag, value, default in (
            ("--models", models, None), ("--sample", sample, 0), ("--batch", batch, "1"), ("--threads", threads, None),
            ("--primitives", primitives, None), ("--int8", int8, False), ("--budget", budget, 3600.0),
            ("--passes", passes, 3), ("--extra-passes", extra_passes, 3), ("--seed", seed, 0),
            ("--isa-variant", isa_variant, None), ("--summary", summary, False), ("--db", db, None)) if value != default]
        if given:
            raise InvalidArgument("--check", f"with {', '.join(given)}",
                                  "allowed alone or with --json (it verifies every primitive on the shipped check specs and stores nothing)")
        _check_primitives(json_out)
        return
    from rooftune.profiling import ISA_VARIANTS, run_isa_variant, summarize
    from rooftune.profiling import profile as run_profile
    from rooftune.store import Store

    batches = _parse_int_list(batch, "batch") or [1]
    thread_list = _parse_int_list(threads, "threads")
    names = _parse_names(models, "--models", "resnet50,mobilenet_v2", "model names") or []
    prims = _parse_names(primitives, "--primitives", "onednn-nchw,aten-im2col-gemm")
    if isa_variant is not None:
        if isa_variant not in ISA_VARIANTS:
            raise InvalidArgument("--isa-variant", isa_variant, f"allowed {', '.join(ISA_VARIANTS)}")
        argv = ["--batch", batch, "--budget", str(budget), "--passes", str(passes), "--extra-passes", str(extra_passes),
                "--seed", str(seed)]
        for flag, value in (("--models", models), ("--threads", threads), ("--primitives", primitives), ("--db", db)):
            if value:
                argv += [flag, value]
        argv += ["--sample", str(sample)] if sample else []
        argv += [f for f, on in (("--int8", int8), ("--summary", summary), ("--json", json_out)) if on]
        code = run_isa_variant(isa_variant, argv)
        if code:
            raise typer.Exit(code)
        return
    progress, update = _progress()
    with progress:
        result, layers = run_profile(names, sample=sample, batches=batches, threads=thread_list, primitives=prims,
                                     precisions=("fp32", "int8") if int8 else ("fp32",), budget_s=budget, seed=seed,
                                     db=db, progress=update, passes=passes, extra_passes=extra_passes)
    rows_summary: list[dict[str, Any]] = []
    if summary and layers:
        with Store(db) as s:
            rows_summary = summarize(s.profiles(result.platform_id), layers)
    if json_out:
        sys.stdout.write(json.dumps({"campaign": result.to_dict(), "summary": rows_summary}, indent=2, default=str) + "\n")
    else:
        _print_profile(result, rows_summary)


def _pct(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 100:.1f} %"


def _print_eval(r: dict[str, Any]) -> None:
    out.print(f"leave-one-network-out on platform {r.get('platform_id')} ({threads_of(r.get('threads'))}): "
              f"{r.get('specs')} specs, held out in turn: {', '.join(r['networks'])}", markup=False, highlight=False)
    t = Table(title="Regressors (predicted time per primitive, held-out networks)", title_justify="left")
    for col in ("model", "MAPE", "RMSPE", "within +-10 %", "Spearman", "top-1", "top-1 within 5 %", "regret mean",
                "regret worst", "fit"):
        t.add_column(col, justify="left" if col == "model" else "right")
    for name, m in r["regressors"].items():
        t.add_row(name, _pct(m.get("mape")), _pct(m.get("rmspe")), _pct(m.get("within_10pct")),
                  f"{m.get('spearman', math.nan):.3f}", _pct(m.get("top1")), _pct(m.get("top1_within_5pct")),
                  _pct(m.get("regret_mean")), _pct(m.get("regret_worst")), _seconds(m.get("fit_s", math.nan)))
    out.print(t)
    _print_by_primitive(r["regressors"])
    ps = r.get("probe_scaling") or {}
    if ps.get("scaled"):
        out.print(f"times brought to the quiet machine: {ps['scaled']} of {ps['rows']} rows had their fastest pass while "
                  f"the machine-speed probe read slow, divided by {ps['median']:.3f} (median; 90th percentile "
                  f"{ps['p90']:.3f})", highlight=False)
    rep = r.get("repeatability") or {}
    if rep.get("rows"):
        out.print(f"the held-out rows against themselves: {_pct(rep['within_10pct'])} of {rep['rows']} had a second pass "
                  f"within 10 % of their stored time ({_pct(rep['within_5pct'])} within 5 %); a row that disagrees "
                  "with itself by more is predicted within +-10 % only by chance", highlight=False)
        if rep.get("fastest_specs"):
            out.print(f"their second-fastest passes name the same fastest primitive on {_pct(rep['same_fastest'])} of "
                      f"{rep['fastest_specs']} specs (the top-1 of a second look)", highlight=False)
        steady = {name: m for name, m in r["regressors"].items() if m.get("steady_pairs")}
        if steady:
            out.print("within +-10 % on the steady rows only: " + ", ".join(
                f"{name} {_pct(m['within_10pct_steady'])} of {m['steady_pairs']}" for name, m in steady.items()),
                highlight=False)
    t = Table(title="Choosing the method directly (held-out networks)", title_justify="left")
    for col in ("chooser", "accuracy", "regret mean", "regret worst", "fallbacks"):
        t.add_column(col, justify="left" if col == "chooser" else "right")
    for group in ("classifiers", "baselines"):
        for name, m in r.get(group, {}).items():
            t.add_row(f"{name} ({group[:-1]})", _pct(m.get("accuracy")), _pct(m.get("regret_mean")),
                      _pct(m.get("regret_worst")), str(m.get("fallbacks", 0)))
    out.print(t)
    if "select_time" in r:
        st = r["select_time"]
        out.print(f"selecting all {st['layers']} convolutions of {st['model']}: {_seconds(st['seconds'])}", markup=False,
                  highlight=False)


def _print_by_primitive(regressors: dict[str, Any]) -> None:
    """Per primitive: each regressor's share within +-10 % and its bias (median predicted over
    measured), so that a primitive the models predict too fast stands out."""
    names = [n for n, m in regressors.items() if m.get("by_primitive")]
    if not names:
        return
    t = Table(title="Per primitive (held-out networks): within +-10 %, and median predicted / measured",
              title_justify="left")
    t.add_column("primitive")
    t.add_column("pairs", justify="right")
    for n in names:
        t.add_column(n, justify="right")
    prims = dict.fromkeys(p for n in names for p in regressors[n]["by_primitive"])
    for p in prims:
        cells = [regressors[n]["by_primitive"].get(p) for n in names]
        pairs = next(c["pairs"] for c in cells if c)
        t.add_row(p, str(pairs), *(f"{_pct(c['within_10pct'])}  x{c['bias']:.2f}" if c else "-" for c in cells))
    out.print(t)


#: Below this share of rows whose passes agree within 10 %, a transfer curve on the data is flagged.
POOR_REPEATABILITY = 0.5


def _curve_table(result: dict[str, Any], key: str, title: str) -> Table:
    """A learning curve's figure ``key`` per method (rows that have it) and k (columns)."""
    t = Table(title=title, title_justify="left")
    t.add_column("method")
    for k in result["ks"]:
        t.add_column(f"k={k}", justify="right")
    for m, c in result["curve"].items():
        if any(key in v for v in c.values()):
            t.add_row(m, *[_pct(c[k][key]) if key in c.get(k, {}) else "-" for k in result["ks"]])
    return t


def _print_target_repeatability(result: dict[str, Any]) -> None:
    """After a learning curve: how far the target's data agrees with itself, and each method's
    share within +-10 % on the steady rows alone."""
    rep = result.get("repeatability") or {}
    if not rep.get("rows"):
        return
    out.print(f"the target's rows against themselves: {_pct(rep['within_10pct'])} of {rep['rows']} had a second pass "
              f"within 10 % of their stored time ({_pct(rep['within_5pct'])} within 5 %)", highlight=False)
    if any("within_10pct_steady" in v for c in result["curve"].values() for v in c.values()):
        out.print(_curve_table(result, "within_10pct_steady",
                               "within +-10 % on the steady test rows only (second pass within 10 %)"))
    if rep["within_10pct"] < POOR_REPEATABILITY:
        _labelled(err, "warning", "yellow", f"only {_pct(rep['within_10pct'])} of the target's rows repeat within 10 %: "
                  "the curve measures their noise more than the transfer; profile the target again in a quieter "
                  "hour (rooftune profile says how the machine read)")


@app.command()
def train(
    estimator: Annotated[str, typer.Option("--estimator", help="mlp (the shipped model's kind), gbr (gradient boosting) or rf (random forest).")] = "mlp",
    target: Annotated[str, typer.Option("--target", help="What the regressor learns: time (log seconds), per_flop (log seconds per FLOP), roofline (mlp only: a fixed cost plus FLOPs at a learned throughput) or auto (roofline for the mlp, time for gbr and rf).")] = "auto",
    eval_: Annotated[bool, typer.Option("--eval", help="Leave-one-network-out figures for gbr, rf, mlp, mlp/roofline and the classifiers.")] = False,
    held_out: Annotated[str | None, typer.Option("--held-out", help="With --eval: only hold out these networks (default: each in turn).")] = None,
    platform: Annotated[str | None, typer.Option("--platform", help="Train on this platform's data (default: this machine).")] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="Thread count of the profiled rows (default: the most profiled).")] = None,
    save: Annotated[str | None, typer.Option("--save", help="Write the fitted model to FILE (a .rtmodel model file: data, loading it runs no code).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as one JSON object.")] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
) -> None:
    """Learn a performance model of the convolution primitives from profiled data."""
    from rooftune.perfmodel import ESTIMATORS, evaluate, load_profile_data
    from rooftune.perfmodel import train as fit
    from rooftune.perfmodel.regressors import resolve_target
    from rooftune.selection.timing import select_time
    from rooftune.store import Store

    if estimator not in ESTIMATORS:
        raise InvalidArgument("--estimator", estimator, f"allowed {', '.join(ESTIMATORS)}")
    try:  # before the store is read; the library's rule, under the flag's name
        resolve_target(estimator, target)
    except InvalidArgument as e:
        raise InvalidArgument("--target", target, e.allowed) from None
    if held_out is not None and not eval_:
        raise InvalidArgument("--held-out", held_out, "allowed only with --eval (the networks the evaluation holds out)")
    if save is not None:
        output_file(save, "--save", parents=True)  # the model is saved with its directories
    with Store(db, create=False) as s:
        data = load_profile_data(s, platform, threads)
    report: dict[str, Any] = {}
    if eval_:
        nets = _parse_names(held_out, "--held-out", "resnet50,mobilenet_v2")
        for n in nets or []:
            if n not in data.networks:
                raise InvalidArgument("--held-out", n, f"profiled networks: {', '.join(data.networks) or 'none'}")
        with _status("evaluating (leave one network out)") as status:
            report = evaluate(data, held_out=nets, progress=lambda m: status.update(m))
    with _status(f"fitting {estimator} on {len(data)} specs", at_once=True):
        model = fit(data, estimator, save, target=target)
    if eval_:
        report["select_time"] = select_time(model)
    report["model"] = {"estimator": estimator, "target": model.target_, "specs": len(data), "primitives": model.primitives_,
                       "saved": save, "provenance": model.provenance_}
    if json_out:
        sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
        return
    if eval_:
        _print_eval(report)
    out.print(f"fitted {estimator} on {len(data)} specs of platform {data.platform_id}"
              + (f"; saved to {save}" if save else " (pass --save FILE to keep it)"), markup=False, highlight=False)


@app.command()
def transfer(
    samples: Annotated[int, typer.Option("--samples", help="Specs to profile on this machine (k).")] = 50,
    sampler: Annotated[str, typer.Option("--sampler", help="cluster (the spec nearest each k-means centre in the feature space) or random.")] = "cluster",
    method: Annotated[str | None, typer.Option("--method", help="ensemble (every shipped base fine-tuned and shifted, mixed by stacked weights; the default without --base), finetune (the nearest or given mlp base; the default with one), residual (boosting on the base's error; the default for a tree base) or scratch.")] = None,
    base: Annotated[str | None, typer.Option("--base", help="Base model FILE (default: the shipped ones, nearest this machine first).")] = None,
    models: Annotated[str, typer.Option("--models", help="Networks whose convolutions join the candidate pool.")] = "resnet50,mobilenet_v2",
    eval_: Annotated[bool, typer.Option("--eval", help="Draw the learning curve on a platform's stored data instead.")] = False,
    target: Annotated[str | None, typer.Option("--target", help="With --eval: the target platform id (default: this machine).")] = None,
    curve: Annotated[str | None, typer.Option("--curve", help="With --eval: write the learning curve to this PNG/SVG.")] = None,
    save: Annotated[str | None, typer.Option("--save", help="Where to write the adapted model (default: next to the store).")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**32 - 1, help="Seed of the sampler (and of the candidate pool's sampled specs).")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
) -> None:
    """Adapt a performance model to this machine from a few profiled samples."""
    from rooftune.perfmodel import (
        ADAPT_METHODS,
        SAMPLERS,
        check_base,
        describe_base,
        learning_curve,
        load_base_models,
        load_model,
        load_profile_data,
    )
    from rooftune.perfmodel import (
        transfer as adapt,
    )
    from rooftune.perfmodel.transfer import plot_learning_curve
    from rooftune.report import check_figure_path
    from rooftune.store import Store

    if sampler not in SAMPLERS:
        raise InvalidArgument("--sampler", sampler, f"allowed {', '.join(SAMPLERS)}")
    if method is not None and method not in ADAPT_METHODS:
        raise InvalidArgument("--method", method, f"allowed {', '.join(ADAPT_METHODS)}")
    if not eval_:
        for flag, value in (("--target", target), ("--curve", curve)):
            if value is not None:
                raise InvalidArgument(flag, value, "allowed only with --eval (it reads a platform's stored data)")
    if target is not None and not target.strip():
        raise InvalidArgument("--target", target, "give a platform id")
    if save is not None:
        output_file(save, "--save", parents=True)
    if curve is not None:
        check_figure_path(curve, "--curve")
    if method == "ensemble" and base is not None:
        raise InvalidArgument("--method", method, "averages the shipped base models: leave out --base, or use finetune")
    if method == "scratch" and base is not None:
        raise InvalidArgument("--method", method, "trains on the samples alone: leave out --base, or use finetune")
    base_model = load_model(base) if base is not None else None
    if base_model is not None:
        check_base(base_model, method)
    if eval_:
        with Store(db, create=False) as s:
            data = load_profile_data(s, target)
        others = []
        if base_model is None:  # the shipped bases that have not seen the target's data, nearest first
            base_model, *others = load_base_models(data.fingerprint, exclude_platform=data.platform_id)
        elif data.platform_id in ((getattr(base_model, "provenance_", None) or {}).get("platforms") or []):
            _labelled(err, "warning", "yellow", f"the base model was trained on platform {data.platform_id}'s data: "
                      "the curve measures it on what it has seen")
        with _status("learning curve") as status:
            result = learning_curve(base_model, data, sampler=sampler, seed=seed, progress=lambda m: status.update(m),
                                    others=others)
        result["base"] = describe_base([base_model, *others])
        if curve:
            result["figure"] = plot_learning_curve(result, curve)
        if json_out:
            sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
            return
        out.print(_curve_table(result, "within_10pct", f"Transfer to {result['target']} from a base model of "
                               f"{result['base']}: predictions within +-10 % on the specs not sampled "
                               f"({result['sampler']} sampler)"))
        _print_target_repeatability(result)
        if curve:
            out.print(f"learning curve written to {curve}", markup=False)
        return
    progress, update = _progress()
    names = _parse_names(models, "--models", "resnet50,mobilenet_v2", "model names") or []
    bases = [base_model] if base_model is not None else load_base_models()
    with progress:
        _model, info = adapt(bases, samples=samples, sampler=sampler, method=method, models=names, seed=seed,
                             db=db, save=save, progress=update)
    if json_out:
        sys.stdout.write(json.dumps(info, indent=2, default=str) + "\n")
        return
    out.print(f"adapted the model to platform {info['platform_id']} with {info['samples']} profiled specs "
              f"({info['sampler']} sampler, {info['method']}"
              + ("" if info["method"] == "scratch" else
                 f" of the base models from {info['base']}" if info["method"] == "ensemble" else
                 f" of a base model from {info['base']}")
              + f"); saved to {info['saved']}", markup=False, highlight=False)


@app.command()
def select(
    model: Annotated[str, typer.Argument(help="A model name, as `rooftune analyze` takes it.")],
    batch: Annotated[int, typer.Option("--batch", help="Batch size the selection is made for.")] = 1,
    input_shape: Annotated[list[str] | None, typer.Option("--input", help="Input shape; repeatable.")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="Model option KEY=VALUE.")] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="Threads (default: all usable cores).")] = None,
    model_file: Annotated[str | None, typer.Option("--model", help="Performance-model FILE, as `rooftune train/transfer --save` writes (default: the one transferred to this machine, else the shipped one); the network is the MODEL argument.")] = None,
    strategy: Annotated[str, typer.Option("--strategy", help="layout-aware (conversions counted) or per-layer.")] = "layout-aware",
    measure: Annotated[bool, typer.Option("--measure/--no-measure", help="Measure against vanilla, best uniform and oracle.")] = True,
    save: Annotated[str | None, typer.Option("--save", help="Write selection.json and load.py to this directory.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
) -> None:
    """Choose a primitive per convolution, rewrite the model, verify it and measure it."""
    from rooftune.perfmodel import default_model, load_model
    from rooftune.selection import save_selection
    from rooftune.selection import select as run_select
    from rooftune.workload import parse_options, parse_shape

    shapes = [parse_shape(s) for s in input_shape or []]
    options = parse_options(option or [])
    from rooftune.workload.models import check_batch

    check_batch(batch, "--batch")
    if save is not None:
        output_dir(save, "--save", parents=True)
    perf, source = (load_model(model_file), model_file) if model_file is not None else default_model()
    with _status("selecting") as status:
        r = run_select(model, batch=batch, shapes=shapes or None, options=options or None, threads=threads,
                       perfmodel=perf, db=db, strategy=strategy,
                       measure_s=8.0 if measure else None, progress=lambda m: status.update(m))
    if save:
        save_selection(r, save)
    d = r.to_dict()
    d["perfmodel"] = source
    if json_out:
        sys.stdout.write(json.dumps(d, indent=2, default=str) + "\n")
        return
    out.print(f"{r.model} (batch {r.batch}, {threads_of(r.threads)}): {r.layers} convolutions selected in "
              f"{_seconds(r.select_time_s)} with {source} ({r.selection.strategy})", markup=False, highlight=False)
    t = Table(title="Selected primitive per convolution", title_justify="left")
    for col in ("layer", "spec", "primitive", "predicted"):
        t.add_column(col, justify="right" if col == "predicted" else "left")
    fell = {f["layer"] for f in r.verification.fallbacks}
    for c in r.selection.choices:
        prim = c.primitive + (" -> default (failed verification)" if c.layer in fell else "")
        t.add_row(c.layer, c.spec.describe(), prim, _seconds(c.time_s) + (" (extrapolated)" if c.extrapolated else ""))
    out.print(t)
    v = r.verification
    out.print(f"verification: {'ok' if v.ok else 'FAILED'}: max error {v.max_rel:.2e} of the output's scale "
              f"(bound {v.tolerance:g}), cosine {v.cosine:.6f}; {len(v.fallbacks)} layer(s) fell back"
              + (f"; {v.why}" if v.why else ""), markup=False, highlight=False)
    for label, cmp in r.comparisons.items():
        ci = ci_text(cmp["ci"][0], cmp["ci"][1], 3, "95 % CI ")
        out.print(f"selected vs {r.label(label)}: {cmp['speedup']:.3f}x ({ci}), "
                  f"{_seconds(cmp['selected_s'])} vs {_seconds(cmp['other_s'])}", markup=False, highlight=False)
    for n in r.notes:
        out.print(f"note: {n}", markup=False, highlight=False)
    if save:
        out.print(f"saved to {save}/selection.json (load.py rebuilds the model)", markup=False)


@app.command("model-convert")
def model_convert(
    old: Annotated[str, typer.Argument(help="A pickled performance model an earlier rooftune saved.")],
    new: Annotated[str, typer.Argument(help="Where to write it as a model file (.rtmodel).")],
    trust_pickle: Annotated[bool, typer.Option("--trust-pickle", help="OLD comes from a trusted source: converting unpickles it, which runs any code it holds.")] = False,
) -> None:
    """Convert a pickled performance model of an earlier rooftune to a model file, which loads as data."""
    from rooftune.perfmodel import convert_pickle, read_header

    if not trust_pickle:
        raise InvalidArgument("--trust-pickle", "not given",
                              "converting unpickles OLD, which runs any code it holds",
                              "add --trust-pickle only for a file from a trusted source")
    output_file(new, "NEW", parents=True)
    header = read_header(convert_pickle(old, new, trust=True))
    out.print(f"converted {old} ({header['kind']}, feature schema {header['feature_schema']}) to {new}", markup=False,
              highlight=False, soft_wrap=True)


@app.command()
def optimize(
    model: Annotated[str, typer.Argument(help="A model as `rooftune analyze` takes it (default: the embedded resnet18, batch 1).")] = "resnet18",
    batch: Annotated[int | None, typer.Option("--batch", help="Batch size (default: the model's, 1 for resnet18).")] = None,
    input_shape: Annotated[list[str] | None, typer.Option("--input", help="Input shape, e.g. 1x3x224x224; repeatable.")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="Model option KEY=VALUE.")] = None,
    objective: Annotated[str, typer.Option("--objective", help="latency (p50 per inference) or throughput (samples/s).")] = "latency",
    budget: Annotated[float, typer.Option("--budget", help="Seconds for the whole run (at least 60), split between the steps.")] = 480.0,
    out_dir: Annotated[str, typer.Option("--out", help="Folder for report.html, summary.json, best.json, the figures.")] = "rooftune-out",
    runtime: Annotated[str | None, typer.Option("--runtime", help="Restrict tuning to these runtimes, e.g. eager,onnxruntime.")] = None,
    skip: Annotated[str | None, typer.Option("--skip", help="Leave out steps: tune, select (comma-separated).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
    fp32: Annotated[bool, typer.Option("--fp32", help="Search fp32 only (by default bf16 too where the CPU has it natively and a peer runs it by default).")] = False,
    bf16: Annotated[bool, typer.Option("--bf16", help="Tune in bf16 (native bf16 CPUs only; the default where a peer runs it).")] = False,
    int8: Annotated[bool, typer.Option("--int8", help="Also tune in int8 (post-training static quantization; guard: cosine >= 0.99, top-1 >= 99%).")] = False,
    calibration: Annotated[int | None, typer.Option("--calibration", help="Inputs in the int8 calibration set (default 32).")] = None,
) -> None:
    """Measure, explain and speed up a model end to end; write a self-contained report."""
    from rooftune.pipeline import STEPS
    from rooftune.pipeline import optimize as run_optimize
    from rooftune.tuning import precisions_for
    from rooftune.workload import parse_options, parse_shape

    shapes = [parse_shape(s) for s in input_shape or []]
    options = parse_options(option or [])
    skipped = _parse_names(skip, "--skip", "tune,select", "steps") or []
    for x in skipped:
        if x not in ("tune", "select"):
            raise InvalidArgument("--skip", x, "allowed tune, select")
    runtimes = _parse_names(runtime, "--runtime", "eager,onnxruntime")
    progress, update = _progress()
    with progress:
        r = run_optimize(model, batch=batch, inputs=shapes or None, options=options or None, objective=objective,
                         budget_s=budget, out=out_dir, db=db,
                         runtimes=runtimes, steps=[s for s in STEPS if s not in skipped], progress=update,
                         precisions=precisions_for(fp32=fp32, bf16=bf16, int8=int8, runtimes=runtimes),
                         calibration_size=calibration)
    if json_out:
        sys.stdout.write(json.dumps(r.to_dict(), indent=2, default=str) + "\n")
    else:
        # the title as a line of its own: a table's title wraps at the table's (narrow) width
        out.print(f"rooftune optimize {r.title} ({r.batch_text()}, {r.objective}) in {r.duration_s:.0f} s",
                  markup=False, highlight=False)
        t = Table()
        for col in ("step", "status", "seconds", "message"):
            t.add_column(col, justify="right" if col == "seconds" else "left")
        for s in r.steps.values():
            colour = {"ok": "green", "failed": "red", "interrupted": "yellow"}.get(s.status, "dim")
            t.add_row(s.name, Text(s.status, style=colour), f"{s.seconds:.1f}", s.message)
        out.print(t)
        out.print(Text(r.headline(), style="bold"))
        if r.select is not None and "vanilla" in r.select.comparisons:
            c = r.select.comparisons["vanilla"]
            out.print(f"selected primitives (PyTorch eager) vs vanilla: {c['speedup']:.2f}x "
                      f"({ci_text(c['ci'][0], c['ci'][1], label='95 % CI ')})", highlight=False)
        out.print(f"report: {r.out / 'report.html'}", markup=False, highlight=False)
        if "best configuration" in r.files:
            _print_load_hint(r.out / "best.json")
    if r.interrupted:
        err.print(f"interrupted: the partial report is {r.out / 'report.html'}; measurements taken are stored",
                  markup=False)
        raise typer.Exit(130)


data_app = typer.Typer(no_args_is_help=True, help="Carry profiled data between machines; prune what is unused.")
app.add_typer(data_app, name="data")


@data_app.command("export")
def data_export(
    file: Annotated[str, typer.Argument(help="FILE.csv or FILE.parquet")],
    platform: Annotated[str | None, typer.Option("--platform", help="Only this platform id.")] = None,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
) -> None:
    """Write profiled rows, each with its platform fingerprint."""
    from rooftune.profiling import export_profiles
    from rooftune.profiling.dataset import check_export_path
    from rooftune.store import Store

    check_export_path(file)  # before the store is opened
    with Store(db, create=False) as s:
        n = export_profiles(s, file, platform)
    out.print(f"wrote {n} rows to {file}", markup=False)


@data_app.command("import")
def data_import(
    file: Annotated[str, typer.Argument(help="FILE.csv or FILE.parquet written by rooftune data export")],
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
) -> None:
    """Check every row of a dataset file, then store them all (or none)."""
    from rooftune.profiling import import_profiles, read_profiles
    from rooftune.store import Store

    rows = read_profiles(file)  # every row checked before the store is opened (or created)
    with Store(db) as s:
        r = import_profiles(s, file, rows)
    out.print(f"read {r['rows']} rows of {r['platforms']} platform(s); {r['added']} added, "
              f"{r['rows'] - r['added']} already stored")


@data_app.command("prune")
def data_prune(
    older_than: Annotated[float | None, typer.Option("--older-than", help="Days unused before something is removed (default 30).")] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Remove them (without it: only list what would go).")] = False,
    db: Annotated[str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL.")] = None,
) -> None:
    """List (or with --apply remove) what is kept only for reuse and unused for DAYS: module files
    exported for studies, the trials of studies left idle, stored analyses. Ceilings, profiled
    rows and performance models are never removed."""
    from rooftune.store import DEFAULT_OLDER_THAN_DAYS, Store, prune
    from rooftune.store.prune import check_days

    days = check_days(DEFAULT_OLDER_THAN_DAYS if older_than is None else older_than)  # before the store is opened
    with Store(db, create=False) as s:
        r = prune(s, days, apply=apply)
        where = s.display_url
    if r.items:
        t = Table(title=f"Unused for {days:g} days (store {where}; modules in {r.modules})", title_justify="left")
        for col in ("kind", "what", "rows", "size", "last used"):
            t.add_column(col, justify="right" if col in ("rows", "size") else "left")
        for i in r.items:
            t.add_row(i.kind, i.name, str(i.rows) if i.rows else "-", fmt_size(i.size_bytes),
                      datetime.fromtimestamp(i.last_used).strftime("%Y-%m-%d %H:%M"))
        out.print(t)
    done = "removed" if apply else "would remove"
    out.print(f"{done} {len(r.items)} item(s): {r.rows} store rows, {fmt_size(r.size_bytes)}"
              + ("" if apply or not r.items else "; dry run, --apply removes them"), markup=False, highlight=False)


@app.command(name="exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    ctx: typer.Context,
    config: Annotated[str, typer.Option("--config", help="A configuration saved by `rooftune tune --save`.")],
    instances: Annotated[int | None, typer.Option(
        "--instances", help="Copies of the command to start side by side (default: the configuration's instances).")] = None,
) -> None:
    """Run a command with a saved configuration's environment: rooftune exec --config best.json -- CMD ...

    A configuration of N concurrent instances (the throughput objective) starts N copies side by
    side, as the study ran them (not pinned to cores of their own, where PyTorch's launcher pins
    its --ninstances); each copy finds ROOFTUNE_INSTANCE (0..N-1) and ROOFTUNE_INSTANCES in its
    environment, and exec exits with the first failing copy's status."""
    import os

    from rooftune.tuning.config import load_config

    cmd = list(ctx.args)
    if not cmd:
        raise InvalidArgument("command", "", "give the command after --, e.g. rooftune exec --config best.json -- python run.py")
    cfg = load_config(config)
    n = cfg.instances if instances is None else instances
    if not 1 <= n <= 1024:
        raise InvalidArgument("--instances", n, "allowed 1..1024")
    env = {**os.environ, **cfg.environment()}
    if cfg.pin:
        if n > 1:
            raise InvalidArgument("--instances", n, "allowed 1 for a pinned configuration (its cores are one instance's)")
        from rooftune.tuning.config import pinned_cpus

        os.sched_setaffinity(0, pinned_cpus(cfg.intra_threads))  # inherited by the command exec runs
    import shutil

    if shutil.which(cmd[0]) is None and not os.path.exists(cmd[0]):
        raise InvalidArgument("command", cmd[0], "not found on PATH")
    sys.stdout.flush()
    if n == 1:
        os.execvpe(cmd[0], cmd, env)
    raise typer.Exit(_run_copies(cmd, env, n))


def _run_copies(cmd: list[str], env: dict[str, str], n: int) -> int:
    """``n`` copies of ``cmd`` side by side; the first non-zero status among them (128 + N for a
    copy a signal ended), else 0. Each copy leads a process group of its own: SIGINT (Ctrl-C),
    SIGTERM and SIGHUP sent to exec reach every process of every copy once (a wrapper script's
    children too), copies not yet started are not started, and exec waits for them all; a copy
    whose exec process dies is sent SIGTERM (Linux). The copies are not in the terminal's
    foreground group: they must not read the terminal, and Ctrl-Z stops exec alone."""
    import signal
    import subprocess

    from rooftune.platform.processes import signal_group, start

    procs: list[subprocess.Popen[bytes]] = []
    stopping: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        stopping.append(signum)
        for p in procs:
            if p.poll() is None:
                signal_group(p, signum)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    try:
        for i in range(n):
            if stopping:
                break
            # the user's programs are sent SIGTERM, not SIGKILL, when exec dies: they may clean up
            procs.append(start(cmd, parent_death=signal.SIGTERM,
                               env={**env, "ROOFTUNE_INSTANCE": str(i), "ROOFTUNE_INSTANCES": str(n)}))
        codes = [p.wait() for p in procs]
        if stopping and len(procs) < n:
            codes.append(-stopping[0])
    finally:
        for p in procs:
            if p.poll() is None:
                signal_group(p, signal.SIGTERM)
                p.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    bad = [c for c in codes if c != 0]
    if not bad:
        return 0
    return bad[0] if bad[0] > 0 else 128 - bad[0]


def version_callback(value: bool) -> None:
    if value:
        import rooftune

        out.print(f"rooftune {rooftune.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """rooftune: measure the roofline, place a model on it, and make it run faster."""


def _usage_line(exc: Any, argv: list[str]) -> str:
    """A usage error (click's) in one line: what was wrong, the value given for the option when
    there was one, and where the options are listed."""
    msg = str(exc.format_message()).strip().rstrip(".")
    if not msg:  # a group run without its command: click printed the group's help, and says nothing
        msg = "give a command, one of those listed above"
    # click's versions word this "No such option: --x" or "No such option '--x'": one form.
    msg = re.sub(r"^No such option: (\S+)", r"No such option '\1'", msg)
    param = getattr(exc, "param", None)
    value = None
    for opt in getattr(param, "opts", None) or []:
        if not opt.startswith("-"):
            break
        for i, tok in enumerate(argv):
            if tok == opt and i + 1 < len(argv):
                value = argv[i + 1]
            elif tok.startswith(opt + "="):
                value = tok[len(opt) + 1:]
    if value is not None:
        # The value beside the option it was given for, whichever way click's version words it
        # ("Invalid value for '--x': 'v' is not a valid float" or "...: input should be ...").
        head, sep, tail = msg.partition(": ")
        if sep:
            head = head if repr(value) in head else f"{head} {value!r}"
            tail = tail.removeprefix(f"{value!r} is ")
            msg = f"{head}{sep}{tail[:1].lower()}{tail[1:]}"
        elif repr(value) not in msg:
            msg = f"{msg} ({value!r})"
    ctx = getattr(exc, "ctx", None)
    where = getattr(ctx, "command_path", None) or "rooftune"
    return f"{msg[:1].lower()}{msg[1:]} (see {where} --help)"


#: Signals that end a command as Ctrl-C does, by KeyboardInterrupt in the main thread, so that the
#: same paths run: trial processes killed, the store's open transaction rolled back, temporary
#: folders removed, a partial report written.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def main(argv: list[str] | None = None) -> int:
    """Entry point: the only place errors become exit codes and one-line messages. A command ended
    by one of STOP_SIGNALS exits 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
    import signal
    import threading

    received: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = {}
    if threading.current_thread() is threading.main_thread():  # where Python runs signal handlers
        for name in STOP_SIGNALS:
            sig = getattr(signal, name)
            if signal.getsignal(sig) is not signal.SIG_IGN:  # ignored by whoever started us (nohup)
                previous[sig] = signal.signal(sig, stop)
    try:
        rc = _main(argv)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # typer turns a KeyboardInterrupt out of a command into exit status 130
    if received and rc == 130:
        err.print(f"interrupted ({signal.Signals(received[0]).name}): nothing half-written was kept")
        return 128 + received[0]
    return rc


def _main(argv: list[str] | None) -> int:
    try:
        rc = app(args=argv, standalone_mode=False, prog_name="rooftune")
        if isinstance(rc, int) and rc:  # typer.Exit(code) inside a command, as click returns it
            return rc
    except RooftuneError as exc:
        _labelled(err, "error", "red", exc)
        return 2
    except OSError as exc:
        # A file that could not be read or written past the checks made up front (a path that
        # changed under the run, a full disk): one line naming it, not a traceback.
        where = f" {exc.filename}" if exc.filename else ""
        _labelled(err, "error", "red", f"cannot use{where}: {exc.strerror or exc}")
        return 2
    except KeyboardInterrupt:
        err.print("interrupted: nothing half-written was kept")
        return 130
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        err.print("aborted")
        return 130
    except Exception as exc:
        # Usage errors (unknown option, bad value): click's ClickException, which typer >= 0.25
        # vendors as typer._click (no `click` module installed), so recognised by what it does.
        if callable(getattr(exc, "format_message", None)) and isinstance(getattr(exc, "exit_code", None), int):
            if exc.exit_code == 0:  # type: ignore[attr-defined]
                return 0
            _labelled(err, "error", "red", _usage_line(exc, sys.argv[1:] if argv is None else argv))
            return int(exc.exit_code)  # type: ignore[attr-defined]
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def run() -> None:
    """Console-script wrapper around :func:`main`."""
    raise SystemExit(main())
