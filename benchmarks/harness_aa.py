"""Does the harness's compare() say "no difference" when there is none? A/A comparisons: a network
against a deep copy of itself (or, with ``--same``, against the very same module), interleaved by
``rooftune.bench.compare`` under the policy `rooftune select` times its rewritten networks with
(``rooftune.selection.comparison_policy``), the copy on side A every other time. Any model
`rooftune analyze` takes (a torchvision name, a built-in such as ``lstm``, ...), batch 1.

    .venv/bin/python benchmarks/harness_aa.py [--models mobilenet_v3_small,resnet18] [--reps 30]
        [--budget 8] [--min-samples 6] [--threads 2] [--same] [--json OUT]

Per network: how many of the 95 % confidence intervals exclude 1.0 (about 5 % when the intervals
are honest), the spread of the ratios between comparisons against the intervals' own half-width,
and on how many comparisons the two sides ran different calls per sample. Two copies of a module
hold their weights at different addresses, so a few percent between them can be real for a while
(where memory landed); an interval that misses 1.0 far more often than 5 % overstates what a
comparison can tell apart.

Target (BENCHMARKS.md, "The harness's A/A check"): the 95 % intervals exclude 1.0 about 5 % of
the time.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
from typing import Any

import numpy as np


def aa(wl: Any, reps: int, policy: Any, same: bool) -> dict[str, Any]:
    from rooftune.bench import compare
    from rooftune.selection import module_runner

    m1 = wl.module
    m2 = m1 if same else copy.deepcopy(m1)
    rows = []
    for i in range(reps):
        a, b = (m1, m2) if i % 2 == 0 else (m2, m1)
        c = compare(module_runner(a, wl.inputs), module_runner(b, wl.inputs), policy=policy)
        finite = all(map(math.isfinite, c.ci))  # a comparison the budget stopped before 6 pairs claims nothing
        rows.append({"ratio": c.ratio, "ci": list(c.ci), "pairs": c.a.n, "numbers": [c.a.number, c.b.number],
                     "finite": finite, "misses": finite and not (c.ci[0] <= 1.0 <= c.ci[1])})
    logs = np.log([r["ratio"] for r in rows])
    half = [(r["ci"][1] - r["ci"][0]) / 2 / r["ratio"] for r in rows if r["finite"]]
    scored = [r["misses"] for r in rows if r["finite"]]
    return {"model": wl.name, "comparisons": reps, "same_module": same, "infinite_intervals": reps - len(scored),
            "ci_misses_1": sum(scored), "miss_share": float(np.mean(scored)) if scored else math.nan,
            "ratio_min": float(np.exp(logs.min())), "ratio_max": float(np.exp(logs.max())),
            "ratio_sd": float(np.std(logs, ddof=1)), "ci_half_width_median": float(np.median(half)) if half else math.nan,
            "pairs_median": float(np.median([r["pairs"] for r in rows])),
            "unequal_numbers": sum(r["numbers"][0] != r["numbers"][1] for r in rows), "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mobilenet_v3_small,resnet18")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--budget", type=float, default=8.0, help="seconds per comparison")
    ap.add_argument("--min-samples", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--same", action="store_true", help="both sides the same module, not a copy")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.reps < 2 or args.budget <= 0 or args.min_samples < 6 or args.threads < 1:
        raise SystemExit("error: --reps must be at least 2, --min-samples at least 6 (fewer give no 95 % interval), "
                         "--budget and --threads positive")
    import dataclasses

    import torch

    from rooftune.errors import RooftuneError
    from rooftune.selection import comparison_policy
    from rooftune.workload import load_workload

    try:  # every name checked before the first comparison; weights=None, batch 1, as `rooftune select` loads them
        workloads = [load_workload(name, batch=1) for name in args.models.split(",")]
    except RooftuneError as exc:
        raise SystemExit(f"error: {exc}") from None
    torch.set_num_threads(args.threads)
    policy = dataclasses.replace(comparison_policy(args.budget), min_samples=args.min_samples)
    out = []
    for name, wl in zip(args.models.split(","), workloads, strict=True):
        r = aa(wl, args.reps, policy, args.same)
        out.append(r)
        print(f"{name}: {r['comparisons']} A/A comparisons ({'same module' if args.same else 'deep copies'}), "
              f"the 95 % CI excludes 1.0 in {r['ci_misses_1']} ({r['miss_share']:.0%} of the "
              f"{r['comparisons'] - r['infinite_intervals']} with a finite one); ratios "
              f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}, sd {r['ratio_sd']:.1%} between comparisons against a "
              f"median CI half-width of {r['ci_half_width_median']:.1%}; {r['pairs_median']:.0f} pairs (median); "
              f"unequal calls per sample in {r['unequal_numbers']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
