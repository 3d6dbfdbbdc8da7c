"""``rooftune tune``: the study of a model's runtime configurations; ``rooftune exec``: a program
run with the configuration a study saved."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from rooftune.cli.model_args import model_args
from rooftune.cli.options import (
    INT8_GUARD,
    Batch,
    Calibration,
    Cluster,
    DataOpt,
    Db,
    Fp32,
    Inputs,
    JsonOut,
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
    bf16_option,
    budget_option,
    int8_option,
    runtime_option,
    save_option,
)
from rooftune.cli.printing import (
    SENSITIVITY_TOP,
    Table,
    err,
    labelled,
    out,
    print_load_hint,
    print_sensitivity,
    print_serving,
    progress_reporter,
)
from rooftune.fileio import json_text
from rooftune.paths import output_file
from rooftune.workload.data import data_spec


def _print_tune(r: Any) -> None:
    out.print(f"[bold]{escape(r.model)}[/bold], objective {r.objective}, {r.batch_text()}: {len(r.trials)} trials "
              f"({sum(1 for t in r.trials if not t.ok)} failed, {r.resumed} from the store) in {r.duration_s:.0f} s")
    from rooftune.tuning.table import guard_lines, tune_columns, tune_rows

    t = Table(title="Configurations (p50 and samples/s from the interleaved comparisons where compared; "
                    "speedup of the best, interleaved, 95% CI)", title_justify="left")
    for col in tune_columns(r):
        t.add_column(col, justify="left" if col in ("name", "configuration", "precision") else "right")
    for row in tune_rows(r):
        t.add_row(*row)
    out.print(t)
    for line in (*r.headline_lines(), r.reversal_line(), r.unsteady_line(), r.drift_line()):
        if line:
            out.print(line, markup=False, highlight=False)
    for line in guard_lines(r):
        out.print(line, markup=False, highlight=False)
    if r.sensitivity is not None:
        print_sensitivity(r.sensitivity, top=SENSITIVITY_TOP)
    print_serving(r)
    standing = r.guideline_text()
    if standing:
        out.print(f"guideline: {standing}; " + "; ".join(r.guideline_reasons), markup=False, highlight=False)
    if r.time_line():
        out.print(r.time_line(), markup=False, highlight=False)
    if r.fleet is not None:
        f = r.fleet
        out.print(f"cluster {f['cluster']}: {f['searched']} searched trials on {len(f['nodes'])} node(s) of platform "
                  f"{f['platform']} in {f['search_s']:.0f} s ({f['trials_per_min']:.1f} trials/min; per node "
                  f"{', '.join(str(n['searched']) for n in f['nodes'].values())}); final comparisons on node "
                  f"{f['final_node'][:12]}", markup=False, highlight=False)
    for n in r.notes:
        labelled(err, "note", "yellow", n)


def tune(
    model: Annotated[str, typer.Argument(help="A model as `rooftune analyze` takes it.")],
    objective: Objective = None,
    budget: Annotated[float | None, budget_option(
        "Seconds for the whole study (default 240, 480 with --scenario server or offline); the guideline, the "
        "baselines and their comparisons with the best are measured whatever it is (about 1-2 minutes on a 2-core "
        "machine).")] = None,
    trials: Annotated[int | None, typer.Option("--trials", help="At most this many searched trials.")] = None,
    batch: Batch = None,
    input_shape: Inputs = None,
    option: ModelOptions = None,
    guidelines_only: Annotated[bool, typer.Option("--guidelines-only", help="No search: the guideline (in each "
                                                  "precision allowed) and the baselines only.")] = False,
    runtime: Annotated[list[str] | None, runtime_option("the search")] = None,
    fp32: Fp32 = False,
    bf16: Annotated[bool, bf16_option("Search bf16 (native bf16 CPUs only; the default where a peer runs it).")] = False,
    int8: Annotated[bool, int8_option(f"Also search int8 ({INT8_GUARD}).")] = False,
    calibration: Calibration = None,
    validate: Annotated[str | None, typer.Option("--validate", help="module:function(outputs, references) -> bool, "
                                                 "in place of the built-in guard.")] = None,
    save: Annotated[str | None, save_option("Write the best configuration to FILE (JSON), its artifact beside it.")] = None,
    json_out: JsonOut = False,
    db: Db = None,
    train: Train = False,
    optimizer: Optimizer = None,
    loss: Loss = None,
    cluster: Cluster = None,
    data: DataOpt = None,
    metric: Metric = None,
    max_drop: MaxDrop = None,
    transform: Transform = None,
    scenario: Scenario = None,
    slo_p99: SloP99 = None,
    slo_p90: SloP90 = None,
) -> None:
    """Tune the runtime configuration of a model, against vanilla PyTorch and the vendor defaults;
    with --cluster, its trials spread over the nodes of one platform of a Ray cluster."""
    from rooftune.tuning import precisions_for
    from rooftune.tuning import tune as run_tune

    args = model_args(input_shape, option, runtime, train, optimizer, loss)
    if save is not None:
        output_file(save, "--save")
    progress, update = progress_reporter()
    with progress:
        r = run_tune(model, objective=objective, budget_s=budget, trials=trials, batch=batch, inputs=args.shapes,
                     options=args.options, guidelines_only=guidelines_only,
                     precisions=precisions_for(fp32=fp32, bf16=bf16, int8=int8, runtimes=args.runtimes),
                     runtimes=args.runtimes, store=db, save=save, progress=update, validate=validate,
                     calibration_size=calibration, train=args.train, cluster=cluster,
                     data=data_spec(data, metric=metric, max_drop=max_drop, transform=transform),
                     scenario=scenario, slo_p99_ms=slo_p99, slo_p90_ms=slo_p90)
    if json_out:
        sys.stdout.write(json_text(r.to_dict(), indent=2, default=str) + "\n")
    else:
        _print_tune(r)
        if save:
            out.print(f"wrote {save}", markup=False)
            print_load_hint(save)


def exec_(
    ctx: typer.Context,
    config: Annotated[str, typer.Option("--config", help="A configuration saved by `rooftune tune --save`.")],
    instances: Annotated[int | None, typer.Option(
        "--instances", help="Copies of the command to start side by side (default: the configuration's instances).")] = None,
) -> None:
    """Run a command with a saved configuration's environment: rooftune exec --config best.json -- CMD ...

    A configuration of N concurrent instances (the throughput objective, a server) starts N copies
    side by side, as the study ran them (a pinned one's each on cores of its own, as PyTorch's
    launcher pins its --ninstances); each copy finds ROOFTUNE_INSTANCE (0..N-1) and ROOFTUNE_INSTANCES in its
    environment, and exec exits with the first failing copy's status."""
    from rooftune.tuning.exec import exec_config

    raise typer.Exit(exec_config(config, ctx.args, instances))
