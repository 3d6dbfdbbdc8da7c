"""``rooftune machine``: the roofline of this machine's CPU or of a CUDA device, measured or read
from the store."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text

from rooftune.cli.options import (
    DB_HELP,
    db_option,
    device_option,
    json_option,
    parse_int_list,
    parse_names,
    threads_option,
)
from rooftune.cli.printing import Table, err, labelled, out, progress_reporter, rate_text
from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text
from rooftune.units import fmt_size

if TYPE_CHECKING:
    from rooftune.machine import Ceilings
    from rooftune.machine.gpu import GpuCeilings


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
            t.add_row(name, *[rate_text(per.get(n, float("nan")), "FLOP/s") for n in c.threads])
        for name in c.skipped:
            t.add_row(name, *["skipped" for _ in c.threads])
    else:  # more thread counts than fit across: one row per count
        t.add_column("threads", justify="right")
        for name in c.peak_flops_per_thread:
            t.add_column(name, justify="right")
        for n in c.threads:
            t.add_row(str(n), *[rate_text(per.get(n, float("nan")), "") for per in c.peak_flops_per_thread.values()])
    out.print(t)
    for name, reason in c.skipped.items():
        out.print(Text(f"{name} skipped: {reason}", style="dim"))

    out.print(_bandwidth_table(c, f"Memory bandwidth on {c.max_threads} threads (bytes/s)", c.capacity_bytes))
    out.print(f"dispatch overhead (one tiny torch op): [bold]{c.dispatch_overhead_s * 1e6:.2f} us[/bold]")
    for w in c.warnings:
        labelled(err, "warning", "yellow", w)


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
        b.add_row(level, fmt_size(cap) if cap else "-", rate_text(bw, "B/s"),
                  *[rate_text(c.bandwidth_by_kernel[k][level], "B/s") if level in c.bandwidth_by_kernel[k] else "-"
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
        t.add_row(name, rate_text(rate, "FLOP/s"), what)
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
        labelled(err, "warning", "yellow", w)


def machine(
    json_out: Annotated[bool, json_option("the ceilings")] = False,
    plot: Annotated[str | None, typer.Option("--plot", help="Draw the roofline to FILE (.png, .svg, .pdf).")] = None,
    plot_sweep: Annotated[
        str | None, typer.Option("--plot-sweep", help="Draw the bandwidth sweep and its plateaus to FILE.")
    ] = None,
    threads: Annotated[list[str] | None, threads_option("Thread counts to measure, e.g. 1,2 (default 1..usable cores).")] = None,
    precision: Annotated[
        list[str] | None, typer.Option("--precision", help="Precisions: fp32,fp64,bf16,int8 (default all); on a CUDA "
                                 "device fp32,fp64,tf32,fp16,bf16,int8,fp8.")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer sweep points, shorter measurements (< 8 s).")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Measure again even if the store has ceilings.")] = False,
    db: Annotated[str | None, db_option(f"{DB_HELP[:-1]} (default $ROOFTUNE_DB or the user data dir).")] = None,
    device: Annotated[str, device_option("cpu, or cuda / cuda:N for the roofline of a CUDA device.")] = "cpu",
) -> None:
    """Measure the machine's roofline: peak FLOP/s, bandwidth of every memory level, dispatch overhead."""
    from rooftune.machine import get_ceilings, validate_precisions
    from rooftune.platform.gpu import parse_device
    from rooftune.report import check_figure_path, plot_roofline
    from rooftune.report import plot_sweep as draw_sweep

    kind, index = parse_device(device)
    thread_list = parse_int_list(threads, "thread count")
    precisions = parse_names(precision, "--precision", "fp32,fp64")
    if kind == "cuda":
        from rooftune.machine.gpu import validate_gpu_precisions

        if thread_list:
            raise InvalidArgument("--threads", ",".join(threads or ()), "applies to --device cpu only (a CUDA device's "
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
    progress, update = progress_reporter()
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
        sys.stdout.write(json_text(c.to_dict(), indent=2) + "\n")
    else:
        (_print_gpu_ceilings if kind == "cuda" else _print_ceilings)(c)
        for p in (plot_path, sweep_path):
            if p:
                out.print(f"wrote {p}", markup=False)
