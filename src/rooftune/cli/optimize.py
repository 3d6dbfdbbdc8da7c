"""``rooftune optimize``: the ceilings, the analysis, the tuning and the selection of one model in
one run, and the report that explains them."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.text import Text

from rooftune.cli.model_args import model_args
from rooftune.cli.options import (
    INT8_GUARD,
    Calibration,
    DataOpt,
    Db,
    Fp32,
    Loss,
    MaxDrop,
    Metric,
    ModelOptions,
    Objective,
    Optimizer,
    Scenario,
    SloP90,
    SloP99,
    Train,
    Transform,
    batch_option,
    bf16_option,
    budget_option,
    input_option,
    int8_option,
    json_option,
    parse_names,
    runtime_option,
)
from rooftune.cli.printing import (
    SENSITIVITY_TOP,
    Table,
    err,
    out,
    print_load_hint,
    print_sensitivity,
    print_serving,
    progress_reporter,
)
from rooftune.fileio import json_text
from rooftune.units import ci_text
from rooftune.workload.data import data_spec


def optimize(
    model: Annotated[str, typer.Argument(help="A model as `rooftune analyze` takes it (default: the embedded "
                                         "resnet18, batch 1).")] = "resnet18",
    batch: Annotated[int | None, batch_option("Batch size (default: the model's, 1 for resnet18).")] = None,
    input_shape: Annotated[list[str] | None, input_option("Input shape, e.g. 1x3x224x224; repeatable.")] = None,
    option: ModelOptions = None,
    objective: Objective = None,
    budget: Annotated[float, budget_option("Seconds for the whole run (at least 60), split between the steps.")] = 480.0,
    out_dir: Annotated[str, typer.Option("--out", help="Folder for report.html, summary.json, best.json, the "
                                         "figures.")] = "rooftune-out",
    runtime: Annotated[list[str] | None, runtime_option("tuning")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="Leave out steps: tune, select (comma-separated, or --skip given for each).")] = None,
    json_out: Annotated[bool, json_option("the summary")] = False,
    db: Db = None,
    fp32: Fp32 = False,
    bf16: Annotated[bool, bf16_option("Tune in bf16 (native bf16 CPUs only; the default where a peer runs it).")] = False,
    int8: Annotated[bool, int8_option(f"Also tune in int8 ({INT8_GUARD}).")] = False,
    calibration: Calibration = None,
    train: Train = False,
    optimizer: Optimizer = None,
    loss: Loss = None,
    data: DataOpt = None,
    metric: Metric = None,
    max_drop: MaxDrop = None,
    transform: Transform = None,
    scenario: Scenario = None,
    slo_p99: SloP99 = None,
    slo_p90: SloP90 = None,
) -> None:
    """Measure, explain and speed up a model end to end; write a self-contained report."""
    from rooftune.pipeline import optimize as run_optimize
    from rooftune.pipeline import steps_without
    from rooftune.tuning import precisions_for

    args = model_args(input_shape, option, runtime, train, optimizer, loss)
    skipped = parse_names(skip, "--skip", "tune,select", "steps") or []
    steps = steps_without(skipped, "--skip")
    progress, update = progress_reporter()
    with progress:
        r = run_optimize(model, batch=batch, inputs=args.shapes, options=args.options or None,
                         objective=objective, budget_s=budget, out=out_dir, store=db,
                         runtimes=args.runtimes, steps=steps, progress=update,
                         precisions=precisions_for(fp32=fp32, bf16=bf16, int8=int8, runtimes=args.runtimes),
                         calibration_size=calibration, train=args.train,
                         data=data_spec(data, metric=metric, max_drop=max_drop, transform=transform),
                         scenario=scenario, slo_p99_ms=slo_p99, slo_p90_ms=slo_p90)
    if json_out:
        sys.stdout.write(json_text(r.to_dict(), indent=2, default=str) + "\n")
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
        for s in r.steps.values():  # a step whose trials all failed: each error once, with its count
            for n, error in s.errors:
                err.print(f"{s.name}: {n} trial{'s' if n != 1 else ''}: {error}", markup=False, highlight=False)
        out.print(Text(r.headline(), style="bold"))
        if r.tune is not None and r.tune.sensitivity is not None:
            print_sensitivity(r.tune.sensitivity, top=SENSITIVITY_TOP, where="the report")
        if r.tune is not None:
            print_serving(r.tune)
        if r.select is not None and "vanilla" in r.select.comparisons:
            c = r.select.comparisons["vanilla"]
            out.print(f"selected primitives (PyTorch eager) vs vanilla: {c['speedup']:.2f}x "
                      f"({ci_text(c['ci'][0], c['ci'][1], label='95 % CI ')})", highlight=False)
        out.print(f"report: {r.out / 'report.html'}", markup=False, highlight=False)
        if "best configuration" in r.files:
            print_load_hint(r.out / "best.json")
    if r.interrupted:
        err.print(f"interrupted: the partial report is {r.out / 'report.html'}; measurements taken are stored",
                  markup=False)
        raise typer.Exit(130)
