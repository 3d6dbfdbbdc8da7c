"""The TensorFlow suite: batch-1 latency of five Keras applications, tuned within a budget each,
against TensorFlow as its users run it (issue "TensorFlow and Keras models").

    .venv/bin/python benchmarks/tf_suite.py [--budget 240] [--models keras:ResNet50,...] [--precisions fp32,bf16]
                                            [--db PATH] [--json OUT]
    .venv/bin/python benchmarks/tf_suite.py --flops        # keras:ResNet50's FLOPs against torchvision resnet50's

Targets:
  * over tensorflow-vanilla, geometric mean over the five models >= 2.5x, and >= 3.5x on one;
  * over intel-recommended-tf and tensorflow-recommended >= 1.3x geomean each;
  * the guideline within 15 % of the searched best.

Every speedup is the interleaved (A B B A) comparison `rooftune tune` makes at its end, in live
pairs of subprocesses, with its 95 % CI. The targets are for a machine of many cores, where the
thread pools' settings matter: on 2 cores every setting runs the same two threads.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: keras:VGG16 is not among them: a process holding its frozen graph takes 13 GB at its first run,
#: and the study with a pair of trial processes does not fit in 24 GB (BENCHMARKS.md, TF Run 3);
#: ``--models keras:VGG16`` runs it where the memory is.
SUITE = ("keras:ResNet50", "keras:MobileNetV2", "keras:InceptionV3", "keras:DenseNet121", "keras:Xception")
PEERS = ("tensorflow-vanilla", "tensorflow-recommended", "intel-recommended-tf")


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def flops() -> int:
    """keras:ResNet50's FLOPs (TensorFlow's graph) against torchvision resnet50's (torch.export),
    by op kind: the two architectures differ where they downsample (see the README)."""
    from rooftune.costs import costs_of
    from rooftune.workload import capture, load_workload

    by: dict[str, dict[str, float]] = {}
    for name in ("keras:ResNet50", "resnet50"):
        g = capture(load_workload(name))
        for c in costs_of(g):
            by.setdefault(name, {}).setdefault(c.kind, 0.0)
            by[name][c.kind] += c.flops or 0.0
    for name, kinds in by.items():
        total = sum(kinds.values())
        print(f"{name}: {total / 1e9:.3f} GFLOP; " + ", ".join(f"{k} {v / 1e9:.3f}" for k, v in sorted(kinds.items()) if v))
    k, t = sum(by["keras:ResNet50"].values()), sum(by["resnet50"].values())
    print(f"keras/torch: {k / t:.4f} ({(k - t) / 1e9:+.3f} GFLOP)")
    return 0


def one_model(args: argparse.Namespace) -> int:
    """One model's study, its figures printed and its row written to ``args.row``."""
    from rooftune.tuning import tune

    name = args.one
    t0 = time.perf_counter()
    r = tune(name, budget_s=args.budget, store=args.db, precisions=tuple(args.precisions.split(",")),
             guidelines_only=args.guidelines_only)
    gap, lo, hi, _ = r.guideline_gap()
    row = {"model": name, "best": r.best.config.describe(), "precision": r.best.config.precision,
           "best_latency_s": r.best.latency_s, "speedup": r.speedup, "guideline_vs_best": gap,
           "guideline_ci": (lo, hi), "trials": len(r.trials), "failed": sum(1 for t in r.trials if not t.ok),
           "headlines": r.headlines(), "wall_s": time.perf_counter() - t0}
    print(f"\n{name}: best {r.best.latency_s * 1e3:.2f} ms = {row['best']} ({row['precision']})  "
          f"[{row['trials']} trials, {row['failed']} failed, {row['wall_s']:.0f} s]")
    for k in PEERS:
        s = r.speedup.get(k)
        b = r.baselines.get(k)
        lat = f"{b.latency_s * 1e3:8.2f} ms" if b and b.ok else "  failed" if b else "       -"
        ratio = f"{s['ratio']:.2f} ({s['ci_low']:.2f}-{s['ci_high']:.2f})" if s else "-"
        print(f"  {k:24s} {lat}  best is {ratio}x faster")
    for line in r.headline_lines():  # the answer against the peers as shipped: what the tuning itself adds
        print(f"  {line}")
    print(f"  guideline {r.guideline.latency_s * 1e3:.2f} ms = {gap:.2f} ({lo:.2f}-{hi:.2f})x the best "
          f"({r.guideline.config.describe()}, {r.guideline.config.precision})", flush=True)
    # the guideline's other configurations (its reduced precisions, TensorFlow with its pools),
    # against the fastest verified trial by the trials' own medians: the comparison above is the
    # fp32 guideline's
    fastest = min(t.trial_score(r.objective) for t in r.trials if t.ok)
    row["guideline_seeds"] = {}
    for t in r.trials:
        if t.ok and t.config.name.startswith("guideline "):
            ratio = t.trial_score(r.objective) / fastest
            row["guideline_seeds"][t.config.name] = {"precision": t.config.precision, "vs_fastest_trial": ratio}
            print(f"  {t.config.name}: {t.trial_latency_s * 1e3:.2f} ms = {ratio:.2f}x the fastest trial (trial "
                  f"medians; {t.config.describe()}, {t.config.precision})", flush=True)
    Path(args.row).write_text(json.dumps(row, default=str))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=240.0, help="seconds per model")
    ap.add_argument("--models", default=",".join(SUITE))
    ap.add_argument("--db", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--guidelines-only", action="store_true", help="no search: the guideline against the peers")
    ap.add_argument("--precisions", default="fp32",
                    help="precisions tuned, comma-separated (fp32,bf16: bf16 where the CPU has it natively, each "
                         "such answer checked by the bf16 guard against TensorFlow's fp32 output)")
    ap.add_argument("--flops", action="store_true", help="keras:ResNet50's FLOPs against torchvision resnet50's")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # one model's study, in its own process
    ap.add_argument("--row", default=None, help=argparse.SUPPRESS)  # where --one writes its row
    args = ap.parse_args()
    if args.flops:
        return flops()

    if args.one:
        if not args.row:
            ap.error("--one needs --row")
        return one_model(args)

    from rooftune.platform import current_platform

    platform = current_platform()
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}; "
          f"budget {args.budget:.0f} s per model, precisions {args.precisions}", flush=True)
    rows = []
    # each model is tuned in a process of its own: a study's TensorFlow graphs, sessions and Keras
    # models stay in its process until it exits (keras:VGG16's frozen graph alone takes several GB
    # to build), so one process for the five would carry every model's memory into the next
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            row_file = Path(tmp) / "row.json"
            cmd = [sys.executable, __file__, "--one", name, "--row", str(row_file), "--budget", str(args.budget),
                   "--precisions", args.precisions] + (["--db", args.db] if args.db else []) + (
                   ["--guidelines-only"] if args.guidelines_only else [])
            code = subprocess.run(cmd, check=False).returncode
            if code != 0 or not row_file.exists():
                print(f"\n{name}: its study failed (exit status {code}); left out of the figures", flush=True)
                continue
            rows.append(json.loads(row_file.read_text()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2, default=str)

    def col(k: str) -> list[float]:
        return [r["speedup"][k]["ratio"] if k in r["speedup"] else math.nan for r in rows]

    def complete(xs: list[float]) -> bool:  # every model of the suite, every ratio measured
        return len(xs) >= len(SUITE) and all(math.isfinite(x) for x in xs)

    print()
    for k in PEERS:
        xs = col(k)
        print(f"over {k}: geomean {geomean(xs):.2f}x, max {max(xs, default=math.nan):.2f}x over "
              f"{sum(map(math.isfinite, xs))} of {len(rows)} model(s)")
    # the guideline in the best's precision: the fp32 guideline interleaved where the best is fp32,
    # else its seed in that precision (trial medians: the study does not compare it interleaved);
    # a best that is a peer as installed ("default") has no such seed, so its gap is unmeasured
    gaps = [r["guideline_vs_best"] if r["precision"] == "fp32" else next(
        (g["vs_fastest_trial"] for g in r["guideline_seeds"].values() if g["precision"] == r["precision"]), math.nan)
        for r in rows]
    print("guideline in the best's precision / best: "
          + ", ".join(f"{r['model']} {g:.2f}" for r, g in zip(rows, gaps, strict=True)))
    vanilla = col("tensorflow-vanilla")
    verdicts = {
        "over tensorflow-vanilla: geomean >= 2.5x, >= 3.5x on one": complete(vanilla) and geomean(vanilla) >= 2.5
        and max(vanilla) >= 3.5,
        "over tensorflow-recommended: geomean >= 1.3x": complete(col("tensorflow-recommended"))
        and geomean(col("tensorflow-recommended")) >= 1.3,
        "over intel-recommended-tf: geomean >= 1.3x": complete(col("intel-recommended-tf"))
        and geomean(col("intel-recommended-tf")) >= 1.3,
        "the guideline within 15 % of the best": complete(gaps) and max(gaps) <= 1.15,
    }
    for what, ok in verdicts.items():
        print(f"{'met' if ok else 'NOT met'}: {what}")
    met = all(verdicts.values())
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
