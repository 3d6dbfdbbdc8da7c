"""Do the tuning study's final comparisons hold when measured again? Each comparison of the best
against a baseline (``rooftune.tuning.compare.interleaved``) runs both sides in fresh processes,
timed in turn, spread over a few pairs of processes; a process can run slower than the next for
its whole life, so the interval must cover what another set of processes would find.

    .venv/bin/python benchmarks/compare_coverage.py [--model resnet18] [--reps 6] [--pairs 2,4]
        [--json OUT]

Two comparisons, each repeated ``--reps`` times for every number of process pairs in ``--pairs``
(the settings alternated, so drift of the host falls on all of them):

- A/A: vanilla PyTorch eager against itself (a second, identical configuration in its own
  processes): the true ratio is 1.0.
- A/B: ONNX Runtime's default against vanilla PyTorch: the reference ratio is the median of every
  single pair of processes' ratio over the whole run (each an independent draw of both sides).

Per setting: how many intervals cover the true or reference ratio, under the interval the study
reports (``grouped``: the process pairs resampled, then the samples within them) and under the
pooled-samples interval alone (``pooled``: the samples resampled as if independent), with the
intervals' median half-width and the spread of the single pairs' ratios.

Target: none stated (BENCHMARKS.md, "The tuning study's comparisons across fresh processes"):
the counts say how often the study's 95 % interval covers what other processes find.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np


def summarize(rows: list[dict[str, Any]], truth: float) -> dict[str, Any]:
    out: dict[str, Any] = {"comparisons": len(rows), "truth": truth}
    for kind in ("grouped", "pooled"):
        cis = [r[kind] for r in rows if all(map(math.isfinite, r[kind]))]
        out[f"{kind}_covers"] = sum(lo <= truth <= hi for lo, hi in cis)
        out[f"{kind}_finite"] = len(cis)
        out[f"{kind}_half_width"] = float(np.median([(hi - lo) / 2 / r["ratio"] for r, (lo, hi) in
                                                     zip(rows, [r[kind] for r in rows]) if math.isfinite(hi - lo)] or [math.nan]))
    logs = np.log([r["ratio"] for r in rows])
    out["ratio_min"], out["ratio_max"] = float(np.exp(logs.min())), float(np.exp(logs.max()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--pairs", default="2,4", help="numbers of process pairs per comparison, comma-separated")
    ap.add_argument("--json")
    args = ap.parse_args()
    try:
        pair_counts = [int(p) for p in args.pairs.split(",")]
    except ValueError:
        raise SystemExit(f"error: --pairs {args.pairs!r}: allowed comma-separated whole numbers >= 1") from None
    if args.reps < 2 or min(pair_counts) < 1:
        raise SystemExit("error: --reps must be at least 2 and every --pairs entry at least 1")
    from rooftune.errors import RooftuneError
    from rooftune.runconfig import RunConfig
    from rooftune.tuning.compare import interleaved
    from rooftune.tuning.study import Setup
    from rooftune.workload import load_workload

    try:
        load_workload(args.model, batch=1)
    except RooftuneError as exc:
        raise SystemExit(f"error: {exc}") from None
    setup = Setup({"model": args.model, "inputs": None, "options": {}}, Path(tempfile.mkdtemp(prefix="coverage-")))
    vanilla = RunConfig(runtime="eager", set_threads=False, name="vanilla")
    twin = replace(vanilla, runtime_options={"identical_twin": True}, name="vanilla (twin)")  # eager reads no options
    ort = RunConfig(runtime="onnxruntime", set_threads=False, vendor_defaults=True, name="onnxruntime-default")
    kinds = {"A/A": (vanilla, twin), "A/B": (ort, vanilla)}
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {(k, p): [] for k in kinds for p in pair_counts}
    singles: dict[str, list[float]] = {k: [] for k in kinds}
    for rep in range(args.reps):
        for p in pair_counts:
            for kind, (a, b) in kinds.items():
                d = interleaved(a, b, setup, pairs=p)
                if "error" in d:
                    raise SystemExit(f"error: {kind} comparison failed: {d['error']}")
                row = {"ratio": d["ratio"], "grouped": (d["ci_low"], d["ci_high"]), "pooled": tuple(d["pooled_ci"]),
                       "pair_ratios": d["process_pair_ratios"]}
                rows[(kind, p)].append(row)
                singles[kind] += d["process_pair_ratios"]
                print(f"{time.strftime('%H:%M:%S')} rep {rep} {kind} {p} pair(s): {d['ratio']:.3f} grouped "
                      f"{d['ci_low']:.3f}-{d['ci_high']:.3f} pooled {d['pooled_ci'][0]:.3f}-{d['pooled_ci'][1]:.3f} "
                      f"per pair {', '.join(f'{x:.3f}' for x in d['process_pair_ratios'])}", flush=True)
    truths = {"A/A": 1.0, "A/B": float(np.median(singles["A/B"]))}
    out = []
    print(f"\n{args.model}: single pairs of processes' ratios, A/A {min(singles['A/A']):.3f}-{max(singles['A/A']):.3f}, "
          f"A/B {min(singles['A/B']):.3f}-{max(singles['A/B']):.3f} (reference {truths['A/B']:.3f})")
    print(f"{'comparison':<8}{'pairs':>6}{'n':>4}  {'grouped covers':>15}{'half-width':>11}  {'pooled covers':>14}{'half-width':>11}  ratios")
    for (kind, p), rs in rows.items():
        s = summarize(rs, truths[kind])
        out.append({"kind": kind, "process_pairs": p, **s, "rows": rs})
        print(f"{kind:<8}{p:>6}{len(rs):>4}  {s['grouped_covers']:>9}/{s['grouped_finite']:<5}{s['grouped_half_width']:>10.1%}  "
              f"{s['pooled_covers']:>8}/{s['pooled_finite']:<5}{s['pooled_half_width']:>10.1%}  "
              f"{s['ratio_min']:.3f}-{s['ratio_max']:.3f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=float)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
