"""``rooftune profile``: the resumable campaign that times every convolution primitive per
layer on this machine, and ``--check``, which verifies the primitives."""

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
    int8_option,
    models_option,
    parse_int_list,
    parse_names,
    seed_option,
    threads_option,
)
from rooftune.cli.printing import Table, err, labelled, out, progress_reporter, seconds_text
from rooftune.errors import InvalidArgument
from rooftune.fileio import json_text


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
        t.add_row(r["model"], str(r["threads"]), f"{r['profiled']}/{r['layers']}", seconds_text(r["baseline_s"]),
                  seconds_text(r["best_s"]), f"{r['speedup']:.2f}x", wins)
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
        sys.stdout.write(json_text({"primitives": per, "failed": [
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
            labelled(err, "failed", "red", f"{v.primitive} on {v.spec.describe()}: {v.reason}")
    if failed:
        raise typer.Exit(1)


def profile(
    models: Annotated[list[str] | None, models_option("Profile every convolution of these models, e.g. "
                                                "resnet50,mobilenet_v2.")] = None,
    sample: Annotated[int, typer.Option("--sample", help="Also profile N specs sampled (Sobol) over realistic "
                                        "ranges.")] = 0,
    batch: Annotated[list[str] | None, batch_option("Batch sizes, e.g. 1,8 (default 1).")] = None,
    threads: Annotated[list[str] | None, threads_option("Thread counts, e.g. 1,2 (default: all usable cores).")] = None,
    primitives: Annotated[list[str] | None, typer.Option("--primitives", help="Only these primitives (default: all).")] = None,
    int8: Annotated[bool, int8_option("Also profile every spec in int8 (the int8 primitives).")] = False,
    budget: Annotated[float, budget_option("Seconds; the campaign stops between specs and resumes when run "
                                           "again.")] = 3600.0,
    passes: Annotated[int, typer.Option("--passes", help="Time every row in this many passes over the whole "
                                        "campaign; each row keeps its fastest (1..10).")] = 3,
    extra_passes: Annotated[int, typer.Option(
        "--extra-passes", help="Then time again, in up to this many more passes, the rows whose fastest pass no pass "
        "timed on a quiet machine confirmed within 3 %, each once the machine reads quiet (0..10).")] = 3,
    seed: Annotated[int, seed_option("Seed of the sampled specs.")] = 0,
    isa_variant: Annotated[str | None, typer.Option("--isa-variant", help="Run capped to an ISA (avx, avx2, avx512): "
                                                    "an emulated platform of its own.")] = None,
    summary: Annotated[bool, typer.Option("--summary", help="Print per-model winners and the per-layer best against "
                                          "F.conv2d.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Only verify every primitive against F.conv2d on the shipped "
                                        "check specs.")] = False,
    json_out: JsonOut = False,
    db: Db = None,
    cluster: Cluster = None,
) -> None:
    """Profile convolution primitives per layer on this machine, or on every platform of a Ray
    cluster's nodes (resumable campaign)."""
    if check:
        given = [flag for flag, value, default in (
            ("--models", models, None), ("--sample", sample, 0), ("--batch", batch, None), ("--threads", threads, None),
            ("--primitives", primitives, None), ("--int8", int8, False), ("--budget", budget, 3600.0),
            ("--passes", passes, 3), ("--extra-passes", extra_passes, 3), ("--seed", seed, 0),
            ("--isa-variant", isa_variant, None), ("--summary", summary, False), ("--db", db, None),
            ("--cluster", cluster, None)) if value != default]
        if given:
            raise InvalidArgument("--check", f"with {', '.join(given)}",
                                  "allowed alone or with --json (it verifies every primitive on the shipped check "
                                  "specs and stores nothing)")
        _check_primitives(json_out)
        return
    from rooftune.profiling import profile as run_profile
    from rooftune.profiling import run_isa_variant, summarize
    from rooftune.store import Store

    batches = parse_int_list(batch, "batch") or [1]
    thread_list = parse_int_list(threads, "threads")
    names = parse_names(models, "--models", "resnet50,mobilenet_v2", "model names") or []
    prims = parse_names(primitives, "--primitives", "onednn-nchw,aten-im2col-gemm")
    if cluster is not None:
        if isa_variant is not None:
            raise InvalidArgument("--isa-variant", isa_variant, "not allowed with --cluster (a node profiles as "
                                  "the platform it is)")
        _profile_fleet(cluster, names, sample=sample, batches=batches, threads=thread_list, primitives=prims,
                       int8=int8, budget=budget, seed=seed, db=db, passes=passes, extra_passes=extra_passes,
                       json_out=json_out)
        return
    if isa_variant is not None:  # run_isa_variant refuses an unknown variant before it starts anything
        argv = ["--budget", str(budget), "--passes", str(passes), "--extra-passes", str(extra_passes),
                "--seed", str(seed)]
        # the list options, each value passed as it was given (a repeated option accumulates)
        for flag, values in (("--batch", batch), ("--models", models), ("--threads", threads),
                             ("--primitives", primitives), ("--db", [db] if db else None)):
            for value in values or ():
                argv += [flag, value]
        argv += ["--sample", str(sample)] if sample else []
        argv += [f for f, on in (("--int8", int8), ("--summary", summary), ("--json", json_out)) if on]
        code = run_isa_variant(isa_variant, argv)
        if code:
            raise typer.Exit(code)
        return
    progress, update = progress_reporter()
    with progress:
        result, layers = run_profile(names, sample=sample, batches=batches, threads=thread_list, primitives=prims,
                                     precisions=("fp32", "int8") if int8 else ("fp32",), budget_s=budget, seed=seed,
                                     db=db, progress=update, passes=passes, extra_passes=extra_passes)
    rows_summary: list[dict[str, Any]] = []
    if summary and layers:
        with Store(db) as s:
            rows_summary = summarize(s.profiles(result.platform_id), layers)
    if json_out:
        sys.stdout.write(json_text({"campaign": result.to_dict(), "summary": rows_summary}, indent=2, default=str) + "\n")
    else:
        _print_profile(result, rows_summary)


def _profile_fleet(cluster: str, names: list[str], *, sample: int, batches: list[int], threads: list[int] | None,
                   primitives: list[str] | None, int8: bool, budget: float, seed: int, db: str | None, passes: int,
                   extra_passes: int, json_out: bool) -> None:
    from rooftune.profiling import profile_fleet

    progress, update = progress_reporter()
    with progress:
        result, _ = profile_fleet(cluster, names, sample=sample, batches=batches, threads=threads,
                                  primitives=primitives, precisions=("fp32", "int8") if int8 else ("fp32",),
                                  budget_s=budget, seed=seed, db=db, progress=update, passes=passes,
                                  extra_passes=extra_passes)
    if json_out:
        sys.stdout.write(json_text({"campaigns": {pid: r.to_dict() for pid, r in result.results.items()},
                                     "units": result.units, "stopped_by_budget": result.stopped_by_budget},
                                    indent=2, default=str) + "\n")
        return
    for r in result.results.values():
        _print_profile(r, [])
