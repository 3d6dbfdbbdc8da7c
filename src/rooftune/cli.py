"""The ``rooftune`` command: parses, calls the public API, prints with Rich. Nothing else."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from rooftune.errors import InvalidArgument, RooftuneError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Why does my deep-learning model run this fast on this machine, and how do I make it faster?",
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


def _parse_int_list(value: str | None, name: str) -> list[int] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    result = []
    for v in items:
        try:
            result.append(int(v))
        except ValueError:
            raise InvalidArgument(name, v, "expected integers separated by commas, e.g. 1,2") from None
    if not result:
        raise InvalidArgument(name, value, "expected integers separated by commas, e.g. 1,2")
    return result


def _rate(v: float, unit: str) -> str:
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.1f} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def _size(b: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def _progress() -> tuple[Any, Any]:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
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
        f"[bold]{p.cpu_model}[/bold] ({p.microarchitecture or 'unknown microarchitecture'}), "
        f"{p.physical_cores} cores / {p.logical_cores} CPUs, usable {p.usable_cores}{quota}; "
        f"ISA {' '.join(p.effective_isa)}" + (f" (capped at {p.isa_cap})" if p.isa_cap else "")
    )
    out.print(f"platform id [bold]{p.id}[/bold]; OpenMP {((p.openmp or {}).get('library')) or 'none'}; "
              f"torch {p.library_versions.get('torch')}, oneDNN {p.library_versions.get('onednn')}, "
              f"MKL {p.library_versions.get('mkl')}")
    when = datetime.fromtimestamp(c.measured_at).strftime("%Y-%m-%d %H:%M")
    if c.from_store:
        out.print(f"[dim]from the store, measured {when}{' (quick)' if c.quick else ''}; --refresh re-measures[/dim]")
    else:
        out.print(f"[dim]measured {when} in {c.duration_s:.1f} s{' (quick)' if c.quick else ''}[/dim]")

    t = Table(title="Peak compute (FLOP/s; int8: ops/s)", title_justify="left")
    t.add_column("roof")
    for n in c.threads:
        t.add_column(f"{n} thread{'s' if n > 1 else ''}", justify="right")
    for name, per in c.peak_flops_per_thread.items():
        t.add_row(name, *[_rate(per.get(n, float("nan")), "FLOP/s") for n in c.threads])
    for name, reason in c.skipped.items():
        t.add_row(name, *["skipped" for _ in c.threads])
    out.print(t)
    for name, reason in c.skipped.items():
        out.print(f"[dim]{name} skipped: {reason}[/dim]")

    b = Table(title=f"Memory bandwidth on {c.max_threads} threads (bytes/s)", title_justify="left")
    b.add_column("level")
    b.add_column("capacity", justify="right")
    b.add_column("ceiling", justify="right")
    kernels = list(c.bandwidth_by_kernel)
    for k in kernels:
        b.add_column(k, justify="right")
    for level, bw in c.bandwidth.items():
        cap = c.capacity_bytes.get(level)
        b.add_row(
            level,
            _size(cap) if cap else "-",
            _rate(bw, "B/s"),
            *[_rate(c.bandwidth_by_kernel[k][level], "B/s") if level in c.bandwidth_by_kernel[k] else "-" for k in kernels],
        )
    out.print(b)
    out.print(f"dispatch overhead (one tiny torch op): [bold]{c.dispatch_overhead_s * 1e6:.2f} us[/bold]")
    for w in c.warnings:
        err.print(f"[yellow]warning:[/yellow] {w}")


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
        str | None, typer.Option("--precision", help="Precisions: fp32,fp64,bf16,int8 (default all).")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer sweep points, shorter measurements (< 8 s).")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Measure again even if the store has ceilings.")] = False,
    db: Annotated[
        str | None, typer.Option("--db", help="Store: a file path or SQLAlchemy URL (default $ROOFTUNE_DB or the user data dir).")
    ] = None,
) -> None:
    """Measure the machine's roofline: peak FLOP/s, bandwidth of every memory level, dispatch overhead."""
    from rooftune.machine import get_ceilings, validate_precisions
    from rooftune.report import check_figure_path, plot_roofline
    from rooftune.report import plot_sweep as draw_sweep

    thread_list = _parse_int_list(threads, "thread count")
    precisions = [p.strip() for p in precision.split(",") if p.strip()] if precision else None
    validate_precisions(precisions)
    plot_path = check_figure_path(plot, "--plot") if plot else None
    sweep_path = check_figure_path(plot_sweep, "--plot-sweep") if plot_sweep else None
    progress, update = _progress()
    with progress:
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
        _print_ceilings(c)
        for p in (plot_path, sweep_path):
            if p:
                out.print(f"wrote {p}")


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


def main(argv: list[str] | None = None) -> int:
    """Entry point: the only place errors become exit codes and one-line messages."""
    try:
        app(args=argv, standalone_mode=False)
    except RooftuneError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted: nothing half-written was kept")
        return 130
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            err.print("aborted")
            return 130
        raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def run() -> None:
    """Console-script wrapper around :func:`main`."""
    raise SystemExit(main())
