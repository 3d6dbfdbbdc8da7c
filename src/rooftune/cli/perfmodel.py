"""The performance model of the convolution primitives: ``rooftune train`` fits it on profiled
data, ``transfer`` adapts it to this machine, ``select`` uses it to choose a primitive per
convolution, ``model-convert`` turns an old pickled one into a model file."""

from __future__ import annotations

import math
import sys
from typing import Annotated, Any

import typer

from rooftune.cli.options import (
    Db,
    Inputs,
    JsonOut,
    ModelOptions,
    batch_option,
    eval_option,
    json_option,
    models_option,
    parse_names,
    platform_option,
    save_option,
    seed_option,
    threads_option,
)
from rooftune.cli.printing import (
    Table,
    err,
    labelled,
    out,
    percent_text,
    progress_reporter,
    seconds_text,
    status_display,
)
from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text
from rooftune.paths import output_dir, output_file
from rooftune.units import ci_text, threads_of

#: The networks whose convolutions ``rooftune transfer`` adds to its candidate pool unless told.
TRANSFER_POOL = "resnet50,mobilenet_v2"

def _print_eval(r: dict[str, Any]) -> None:
    out.print(f"leave-one-network-out on platform {r.get('platform_id')} ({threads_of(r.get('threads'))}): "
              f"{r.get('specs')} specs, held out in turn: {', '.join(r['networks'])}", markup=False, highlight=False)
    t = Table(title="Regressors (predicted time per primitive, held-out networks)", title_justify="left")
    for col in ("model", "MAPE", "RMSPE", "within +-10 %", "Spearman", "top-1", "top-1 within 5 %", "regret mean",
                "regret worst", "fit"):
        t.add_column(col, justify="left" if col == "model" else "right")
    for name, m in r["regressors"].items():
        t.add_row(name, percent_text(m.get("mape")), percent_text(m.get("rmspe")), percent_text(m.get("within_10pct")),
                  f"{m.get('spearman', math.nan):.3f}", percent_text(m.get("top1")), percent_text(m.get("top1_within_5pct")),
                  percent_text(m.get("regret_mean")), percent_text(m.get("regret_worst")), seconds_text(m.get("fit_s", math.nan)))
    out.print(t)
    _print_by_primitive(r["regressors"])
    ps = r.get("probe_scaling") or {}
    if ps.get("scaled"):
        out.print(f"times brought to the quiet machine: {ps['scaled']} of {ps['rows']} rows had their fastest pass while "
                  f"the machine-speed probe read slow, divided by {ps['median']:.3f} (median; 90th percentile "
                  f"{ps['p90']:.3f})", highlight=False)
    rep = r.get("repeatability") or {}
    if rep.get("rows"):
        out.print(f"the held-out rows against themselves: {percent_text(rep['within_10pct'])} of {rep['rows']} had a second pass "
                  f"within 10 % of their stored time ({percent_text(rep['within_5pct'])} within 5 %); a row that disagrees "
                  "with itself by more is predicted within +-10 % only by chance", highlight=False)
        if rep.get("fastest_specs"):
            out.print(f"their second-fastest passes name the same fastest primitive on {percent_text(rep['same_fastest'])} of "
                      f"{rep['fastest_specs']} specs (the top-1 of a second look)", highlight=False)
        steady = {name: m for name, m in r["regressors"].items() if m.get("steady_pairs")}
        if steady:
            out.print("within +-10 % on the steady rows only: " + ", ".join(
                f"{name} {percent_text(m['within_10pct_steady'])} of {m['steady_pairs']}" for name, m in steady.items()),
                highlight=False)
    t = Table(title="Choosing the method directly (held-out networks)", title_justify="left")
    for col in ("chooser", "accuracy", "regret mean", "regret worst", "fallbacks"):
        t.add_column(col, justify="left" if col == "chooser" else "right")
    for group in ("classifiers", "baselines"):
        for name, m in r.get(group, {}).items():
            t.add_row(f"{name} ({group[:-1]})", percent_text(m.get("accuracy")), percent_text(m.get("regret_mean")),
                      percent_text(m.get("regret_worst")), str(m.get("fallbacks", 0)))
    out.print(t)
    if "select_time" in r:
        st = r["select_time"]
        out.print(f"selecting all {st['layers']} convolutions of {st['model']}: {seconds_text(st['seconds'])}", markup=False,
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
        t.add_row(p, str(pairs), *(f"{percent_text(c['within_10pct'])}  x{c['bias']:.2f}" if c else "-" for c in cells))
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
            t.add_row(m, *[percent_text(c[k][key]) if key in c.get(k, {}) else "-" for k in result["ks"]])
    return t


def _print_target_repeatability(result: dict[str, Any]) -> None:
    """After a learning curve: how far the target's data agrees with itself, and each method's
    share within +-10 % on the steady rows alone."""
    rep = result.get("repeatability") or {}
    if not rep.get("rows"):
        return
    out.print(f"the target's rows against themselves: {percent_text(rep['within_10pct'])} of {rep['rows']} had a second pass "
              f"within 10 % of their stored time ({percent_text(rep['within_5pct'])} within 5 %)", highlight=False)
    if any("within_10pct_steady" in v for c in result["curve"].values() for v in c.values()):
        out.print(_curve_table(result, "within_10pct_steady",
                               "within +-10 % on the steady test rows only (second pass within 10 %)"))
    if rep["within_10pct"] < POOR_REPEATABILITY:
        labelled(err, "warning", "yellow", f"only {percent_text(rep['within_10pct'])} of the target's rows repeat within 10 %: "
                  "the curve measures their noise more than the transfer; profile the target again in a quieter "
                  "hour (rooftune profile says how the machine read)")


def train(
    estimator: Annotated[str, typer.Option("--estimator", help="mlp (the shipped model's kind), gbr (gradient "
                                           "boosting) or rf (random forest).")] = "mlp",
    target: Annotated[str, typer.Option(
        "--target", help="What the regressor learns: time (log seconds), per_flop (log seconds per FLOP), roofline "
        "(mlp only: a fixed cost plus FLOPs at a learned throughput) or auto (roofline for the mlp, time for gbr and "
        "rf).")] = "auto",
    eval_: Annotated[bool, eval_option("Leave-one-network-out figures for gbr, rf, mlp, mlp/roofline and the "
                                       "classifiers.")] = False,
    held_out: Annotated[list[str] | None, typer.Option("--held-out", help="With --eval: only hold out these networks "
                                                 "(default: each in turn).")] = None,
    platform: Annotated[str | None, platform_option("Train on this platform's data (default: this machine).")] = None,
    threads: Annotated[int | None, threads_option("Thread count of the profiled rows (default: the most profiled).")] = None,
    save: Annotated[str | None, save_option("Write the fitted model to FILE (a .rtmodel model file: data, loading it "
                                            "runs no code).")] = None,
    json_out: Annotated[bool, json_option("the figures")] = False,
    db: Db = None,
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
        raise InvalidArgument("--held-out", ",".join(held_out), "allowed only with --eval (the networks the evaluation holds out)")
    if save is not None:
        output_file(save, "--save", parents=True)  # the model is saved with its directories
    with Store(db, create=False) as s:
        data = load_profile_data(s, platform, threads)
    report: dict[str, Any] = {}
    if eval_:
        nets = parse_names(held_out, "--held-out", "resnet50,mobilenet_v2")
        for n in nets or []:
            if n not in data.networks:
                raise InvalidArgument("--held-out", n, f"profiled networks: {', '.join(data.networks) or 'none'}")
        with status_display("evaluating (leave one network out)") as status:
            report = evaluate(data, held_out=nets, progress=lambda m: status.update(m))
    with status_display(f"fitting {estimator} on {len(data)} specs", at_once=True):
        model = fit(data, estimator, save, target=target)
    if eval_:
        report["select_time"] = select_time(model)
    report["model"] = {"estimator": estimator, "target": model.target_, "specs": len(data), "primitives": model.primitives_,
                       "saved": save, "provenance": model.provenance_}
    if json_out:
        sys.stdout.write(json_text(report, indent=2, default=str) + "\n")
        return
    if eval_:
        _print_eval(report)
    out.print(f"fitted {estimator} on {len(data)} specs of platform {data.platform_id}"
              + (f"; saved to {save}" if save else " (pass --save FILE to keep it)"), markup=False, highlight=False)


def transfer(
    samples: Annotated[int, typer.Option("--samples", help="Specs to profile on this machine (k).")] = 50,
    sampler: Annotated[str, typer.Option("--sampler", help="cluster (the spec nearest each k-means centre in the "
                                         "feature space) or random.")] = "cluster",
    method: Annotated[str | None, typer.Option(
        "--method", help="ensemble (every shipped base fine-tuned and shifted, mixed by stacked weights; the default "
        "without --base), finetune (the nearest or given mlp base; the default with one), residual (boosting on the "
        "base's error; the default for a tree base) or scratch.")] = None,
    base: Annotated[str | None, typer.Option("--base", help="Base model FILE (default: the shipped ones, nearest this "
                                             "machine first).")] = None,
    models: Annotated[list[str] | None, models_option(f"Networks whose convolutions join the candidate pool (default {TRANSFER_POOL}).")] = None,
    eval_: Annotated[bool, eval_option("Draw the learning curve on a platform's stored data instead.")] = False,
    target: Annotated[str | None, typer.Option("--target", help="With --eval: the target platform id (default: this "
                                               "machine).")] = None,
    curve: Annotated[str | None, typer.Option("--curve", help="With --eval: write the learning curve to this "
                                              "PNG/SVG.")] = None,
    save: Annotated[str | None, save_option("Where to write the adapted model (default: next to the store).")] = None,
    seed: Annotated[int, seed_option("Seed of the sampler (and of the candidate pool's sampled specs).")] = 0,
    json_out: JsonOut = False,
    db: Db = None,
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
            labelled(err, "warning", "yellow", f"the base model was trained on platform {data.platform_id}'s data: "
                      "the curve measures it on what it has seen")
        with status_display("learning curve") as status:
            result = learning_curve(base_model, data, sampler=sampler, seed=seed, progress=lambda m: status.update(m),
                                    others=others)
        result["base"] = describe_base([base_model, *others])
        if curve:
            result["figure"] = plot_learning_curve(result, curve)
        if json_out:
            sys.stdout.write(json_text(result, indent=2, default=str) + "\n")
            return
        out.print(_curve_table(result, "within_10pct", f"Transfer to {result['target']} from a base model of "
                               f"{result['base']}: predictions within +-10 % on the specs not sampled "
                               f"({result['sampler']} sampler)"))
        _print_target_repeatability(result)
        if curve:
            out.print(f"learning curve written to {curve}", markup=False)
        return
    progress, update = progress_reporter()
    names = parse_names(models or TRANSFER_POOL, "--models", "resnet50,mobilenet_v2", "model names") or []
    bases = [base_model] if base_model is not None else load_base_models()
    with progress:
        _model, info = adapt(bases, samples=samples, sampler=sampler, method=method, models=names, seed=seed,
                             db=db, save=save, progress=update)
    if json_out:
        sys.stdout.write(json_text(info, indent=2, default=str) + "\n")
        return
    out.print(f"adapted the model to platform {info['platform_id']} with {info['samples']} profiled specs "
              f"({info['sampler']} sampler, {info['method']}"
              + ("" if info["method"] == "scratch" else
                 f" of the base models from {info['base']}" if info["method"] == "ensemble" else
                 f" of a base model from {info['base']}")
              + f"); saved to {info['saved']}", markup=False, highlight=False)


def select(
    model: Annotated[str, typer.Argument(help="A model name, as `rooftune analyze` takes it.")],
    batch: Annotated[int, batch_option("Batch size the selection is made for.")] = 1,
    input_shape: Inputs = None,
    option: ModelOptions = None,
    threads: Annotated[int | None, threads_option("Threads (default: all usable cores).")] = None,
    model_file: Annotated[str | None, typer.Option(
        "--model", help="Performance-model FILE, as `rooftune train/transfer --save` writes (default: the one "
        "transferred to this machine, else the shipped one); the network is the MODEL argument.")] = None,
    strategy: Annotated[str, typer.Option("--strategy", help="layout-aware (conversions counted) or "
                                          "per-layer.")] = "layout-aware",
    measure: Annotated[bool, typer.Option("--measure/--no-measure", help="Measure against vanilla, best uniform and "
                                          "oracle.")] = True,
    save: Annotated[str | None, save_option("Write selection.json and load.py to this directory.")] = None,
    json_out: JsonOut = False,
    db: Db = None,
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
    with status_display("selecting") as status:
        r = run_select(model, batch=batch, shapes=shapes or None, options=options or None, threads=threads,
                       perfmodel=perf, db=db, strategy=strategy,
                       measure_s=8.0 if measure else None, progress=lambda m: status.update(m))
    if save:
        save_selection(r, save)
    d = r.to_dict()
    d["perfmodel"] = source
    if json_out:
        sys.stdout.write(json_text(d, indent=2, default=str) + "\n")
        return
    out.print(f"{r.model} (batch {r.batch}, {threads_of(r.threads)}): {r.layers} convolutions selected in "
              f"{seconds_text(r.select_time_s)} with {source} ({r.selection.strategy})", markup=False, highlight=False)
    t = Table(title="Selected primitive per convolution", title_justify="left")
    for col in ("layer", "spec", "primitive", "predicted"):
        t.add_column(col, justify="right" if col == "predicted" else "left")
    fell = {f["layer"] for f in r.verification.fallbacks}
    for c in r.selection.choices:
        prim = c.primitive + (" -> default (failed verification)" if c.layer in fell else "")
        t.add_row(c.layer, c.spec.describe(), prim, seconds_text(c.time_s) + (" (extrapolated)" if c.extrapolated else ""))
    out.print(t)
    v = r.verification
    out.print(f"verification: {'ok' if v.ok else 'FAILED'}: max error {v.max_rel:.2e} of the output's scale "
              f"(bound {v.tolerance:g}), cosine {v.cosine:.6f}; {len(v.fallbacks)} layer(s) fell back"
              + (f"; {v.why}" if v.why else ""), markup=False, highlight=False)
    for label, cmp in r.comparisons.items():
        ci = ci_text(cmp["ci"][0], cmp["ci"][1], 3, "95 % CI ")
        out.print(f"selected vs {r.label(label)}: {cmp['speedup']:.3f}x ({ci}), "
                  f"{seconds_text(cmp['selected_s'])} vs {seconds_text(cmp['other_s'])}", markup=False, highlight=False)
    for n in r.notes:
        out.print(f"note: {n}", markup=False, highlight=False)
    if save:
        out.print(f"saved to {save}/selection.json (load.py rebuilds the model)", markup=False)


def model_convert(
    old: Annotated[str, typer.Argument(help="A pickled performance model an earlier rooftune saved.")],
    new: Annotated[str, typer.Argument(help="Where to write it as a model file (.rtmodel).")],
    trust_pickle: Annotated[bool, typer.Option("--trust-pickle", help="OLD comes from a trusted source: converting "
                                               "unpickles it, which runs any code it holds.")] = False,
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
