"""Does the per-op timing of `rooftune analyze` account for the model's end-to-end time?

    .venv/bin/python benchmarks/analysis_accounting.py [--budget 10] [--db PATH] [--json OUT]

Targets (issue "Roofline analysis of a model, op by op"):
  * on resnet50, mobilenet_v2, inception_v3, vgg16, googlenet and squeezenet1_0 at batch 1, the
    sum of per-op medians is within 10 % of the end-to-end median (ratio in 0.90..1.10);
  * `rooftune analyze resnet50` takes <= 60 s on a 2-core machine once the ceilings are stored
    (wall clock of the command: interpreter start, imports, model build, capture, timing).

Each model's op runs and end-to-end runs are interleaved in one measurement (measure_parts); the
ratio is the median over runs of (sum of the run's op times / the end-to-end time measured next to
it), with the exact 95 % CI of that median. "sum med" is the sum of the per-op medians, for
reference. The ceilings are taken from the store (measured first if it has none).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("resnet50", "mobilenet_v2", "inception_v3", "vgg16", "googlenet", "squeezenet1_0")
TOLERANCE = 0.10
TIME_LIMIT_S = 60.0
ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=10.0, help="timing budget per model (s)")
    ap.add_argument("--db", default=None, help="store with the ceilings (default: rooftune's)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--json", default=None, help="write the figures to this file")
    args = ap.parse_args()

    from rooftune.analysis import analyze
    from rooftune.machine import get_ceilings
    from rooftune.platform import current_platform

    platform = current_platform()
    ceilings = get_ceilings(db=args.db)
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}, "
          f"torch {platform.library_versions.get('torch')}")
    print(f"{'model':15s} {'ops':>4s} {'e2e ms':>9s} {'ops ms':>9s} {'ratio':>6s} {'95% CI':>13s} "
          f"{'sum med':>9s} {'unattr ms':>9s} {'bound ms':>9s} {'eff':>5s} {'runs':>4s} {'ok':>3s}")
    rows = []
    for name in args.models.split(","):
        [a] = analyze(name, budget_s=args.budget, ceilings=ceilings, save=False)
        ok = abs(a.accounting_ratio - 1) <= TOLERANCE
        rows.append({
            "model": name, "ops": len(a.ops), "end_to_end_s": a.end_to_end_s, "ops_sum_s": a.ops_sum_s, "ops_median_sum_s": a.ops_median_sum_s,
            "ratio": a.accounting_ratio, "ratio_ci": list(a.accounting_ci), "unattributed_s": a.unattributed_s,
            "lower_bound_s": a.lower_bound_s, "efficiency": a.efficiency, "runs": a.runs, "within_10pct": ok,
            "warnings": list(a.warnings),
        })
        print(f"{name:15s} {len(a.ops):4d} {a.end_to_end_s * 1e3:9.2f} {a.ops_sum_s * 1e3:9.2f} "
              f"{a.accounting_ratio:6.3f} {a.accounting_ci[0]:6.3f}-{a.accounting_ci[1]:6.3f} "
              f"{a.ops_median_sum_s * 1e3:9.2f} {a.unattributed_s * 1e3:9.2f} {a.lower_bound_s * 1e3:9.2f} {a.efficiency:5.1%} {a.runs:4d} "
              f"{'yes' if ok else 'NO':>3s}", flush=True)

    cmd = [sys.executable, "-m", "rooftune.cli", "analyze", "resnet50", "--json"]
    if args.db:
        cmd += ["--db", args.db]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
    print(f"`rooftune analyze resnet50`: {wall:.1f} s wall (limit {TIME_LIMIT_S:.0f} s), exit {proc.returncode}")
    result = {"platform_id": platform.id, "cpu": platform.cpu_model, "models": rows,
              "analyze_resnet50_wall_s": wall, "date": time.strftime("%Y-%m-%d")}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    passed = all(r["within_10pct"] for r in rows) and wall <= TIME_LIMIT_S and proc.returncode == 0
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
