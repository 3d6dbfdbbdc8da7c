"""The training suite: a training step tuned against vanilla PyTorch training, and the analysis of
a large model's step within a time limit.

    .venv/bin/python benchmarks/train_suite.py tune [--models ...] [--budget 120] [--fp32] [--guidelines-only]
                                                   [--short] [--db PATH] [--json OUT]
    .venv/bin/python benchmarks/train_suite.py analyze [--model resnet50] [--batch 32] [--budget 10] [--db PATH]

Targets (issue 67, "Training workloads"):
  * ``tune --train`` over vanilla PyTorch training (``vanilla``: eager, its own thread settings,
    the default optimizer), geometric mean over resnet18, mobilenet_v2, lstm and
    transformer-encoder at batch 32: >= 1.5x with bf16 allowed (each bf16 configuration guarded by
    its loss against fp32's), and the fp32-only figure stated beside it (``--fp32``);
  * ``analyze resnet50 --train`` at batch 32 in <= 120 s (ceilings from the store; the analysis
    alone is timed, from loading the model to the placed ops).

The objective is samples per second; every speedup is the study's interleaved comparison of the
best with ``vanilla`` in live pairs of processes, with its 95 % CI. ``--short`` gives each trial
and comparison a budget of a few steps (a step of a model at batch 32 takes seconds on 2 cores):
the figures are then rougher, and say so.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

SUITE = ("resnet18", "mobilenet_v2", "lstm", "transformer-encoder")
BATCH = 32
TARGET_SPEEDUP = 1.5
TARGET_ANALYZE_S = 120.0


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def run_tune(args: argparse.Namespace) -> dict:
    from rooftune.bench import Policy
    from rooftune.tuning import tune

    kwargs: dict = {}
    if args.short:
        kwargs = {"trial_policy": Policy(number=1, warmup_s=0.5, budget_s=3.0, min_samples=3, target_rel_ci=0.05),
                  "compare_policy": Policy(number=1, warmup_s=0.5, budget_s=6.0, min_samples=4, target_rel_ci=0.05),
                  "compare_pairs": 1}
    rows = []
    for model in args.models.split(","):
        t0 = time.perf_counter()
        r = tune(model, train=True, batch=BATCH, budget_s=args.budget, guidelines_only=args.guidelines_only,
                 precisions=("fp32",) if args.fp32 else None, store=args.db, **kwargs)
        v = r.speedup.get("vanilla") or {}
        row = {"model": model, "best": r.best.config.describe(), "precision": r.best.precision,
               "speedup": v.get("ratio", math.nan), "ci": [v.get("ci_low", math.nan), v.get("ci_high", math.nan)],
               "samples_per_s": r.best.throughput, "vanilla_samples_per_s": r.baselines["vanilla"].throughput,
               "verify": {k: r.best.verify.get(k) for k in ("rule", "param_diff", "loss_diff")} if r.best.verify else None,
               "trials": len(r.trials), "failed": sum(1 for t in r.trials if not t.ok), "seconds": time.perf_counter() - t0}
        rows.append(row)
        print(f"{model}: {row['speedup']:.2f}x over vanilla training (95 % CI {row['ci'][0]:.2f}-{row['ci'][1]:.2f}), "
              f"{row['precision']}, {row['best']}; {row['trials']} trials ({row['failed']} failed) in {row['seconds']:.0f} s",
              flush=True)
    g = geomean([r["speedup"] for r in rows])
    print(f"geometric mean over vanilla training ({'fp32 only' if args.fp32 else 'bf16 allowed'}): {g:.2f}x "
          f"(target >= {TARGET_SPEEDUP}x{' with bf16 allowed' if args.fp32 else ''})")
    return {"mode": "fp32" if args.fp32 else "default", "short": args.short, "budget_s": args.budget, "rows": rows,
            "geomean": g}


def run_analyze(args: argparse.Namespace) -> dict:
    from rooftune.analysis import analyze
    from rooftune.machine import get_ceilings
    from rooftune.store import Store

    with Store(args.db) as store:
        ceilings = get_ceilings(quick=True, store=store)  # from the store when measured: not timed
    t0 = time.perf_counter()
    [a] = analyze(args.model, train=True, batch=args.batch, budget_s=args.budget, ceilings=ceilings, db=args.db)
    took = time.perf_counter() - t0
    print(f"analyze {args.model} --train --batch {args.batch}: {took:.1f} s (target <= {TARGET_ANALYZE_S:g} s); "
          f"{len(a.ops)} ops, step {a.end_to_end_s:.2f} s ({a.samples_per_s:.1f} samples/s, {a.runs} runs), op sum "
          f"{a.accounting_ratio:.1%} of the step (95 % CI {a.accounting_ci[0]:.1%}-{a.accounting_ci[1]:.1%}); "
          + ", ".join(f"{p} {t:.2f} s" for p, t in a.phases_s.items()))
    return {"model": args.model, "batch": args.batch, "seconds": took, "ops": len(a.ops), "step_s": a.end_to_end_s,
            "accounting_ratio": a.accounting_ratio, "accounting_ci": list(a.accounting_ci), "phases_s": a.phases_s,
            "flops": a.flops}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("tune")
    t.add_argument("--models", default=",".join(SUITE))
    t.add_argument("--budget", type=float, default=120.0, help="seconds per model")
    t.add_argument("--fp32", action="store_true", help="fp32 only")
    t.add_argument("--guidelines-only", action="store_true", help="the guideline, its bf16 seed and the baselines")
    t.add_argument("--short", action="store_true", help="trials and comparisons of a few steps each")
    a = sub.add_parser("analyze")
    a.add_argument("--model", default="resnet50")
    a.add_argument("--batch", type=int, default=BATCH)
    a.add_argument("--budget", type=float, default=10.0)
    for p in (t, a):
        p.add_argument("--db", default=None)
        p.add_argument("--json", default=None)
    args = ap.parse_args()
    out = run_tune(args) if args.what == "tune" else run_analyze(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
