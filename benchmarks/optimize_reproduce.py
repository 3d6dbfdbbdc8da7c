"""The main job as a new user meets it, and whether its speedup holds when re-measured.

    .venv/bin/python benchmarks/optimize_reproduce.py [--model resnet18] [--budget 480] [--rounds 8]
        [--objective latency|throughput] [--int8] [--out DIR] [--db PATH] [--json OUT]

``--int8`` lets the tuning choose int8 (``rooftune optimize --int8``); a replay of an int8 best
quantizes the model again with the trial's seeded calibration set, so it runs the same model.

Targets (issue "The main job: rooftune optimize MODEL"):
  * `rooftune optimize` on the default model finishes within 10 minutes on a 2-core machine
    (wall clock of the whole command, start-up included);
  * the speedup over vanilla PyTorch it reports is reproduced within 10 % by `rooftune exec`:
    `rooftune exec --config OUT/best.json -- python -m rooftune.tuning.replay OUT/best.json`
    and the same for OUT/vanilla.json, run alternately (A B A B ...) for --rounds rounds, each
    in a fresh process with the configuration's environment; the reproduced speedup is the ratio
    of the median per-round medians, with the harness's 95 % CI (`stats.comparison_ci`; 6 rounds at least).

With ``--objective throughput`` the figure compared is the time per sample: a configuration of N
instances is replayed by the N processes `rooftune exec` starts side by side, and its samples per
second are their sum.

The replay processes start from a clean environment (no OMP_*/MKL_*/KMP_* variables inherited),
as a user's shell would.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ROOFTUNE = [sys.executable, "-m", "rooftune.cli"]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "MKL_", "KMP_", "GOMP_", "LD_PRELOAD",
                                                                       "MALLOC_CONF"))}


def replay(config: Path, seconds: float, instances: int = 1) -> list[dict]:
    """The replay under `rooftune exec`, which starts one copy per instance side by side; their
    JSON results."""
    cmd = [*ROOFTUNE, "exec", "--config", str(config), "--", sys.executable, "-m", "rooftune.tuning.replay",
           str(config), "--seconds", str(seconds)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"replay of {config} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    results = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if len(results) != instances:
        raise SystemExit(f"replay of {config}: {len(results)} results from {instances} instances")
    for r in results:
        if not r["verify"]["ok"]:
            raise SystemExit(f"replay of {config} produced a wrong output: {r['verify']}")
    return results


def figure(config: Path, seconds: float, objective: str) -> float:
    """Seconds per call (latency) or per sample over all instances (throughput)."""
    if objective == "latency":
        return replay(config, seconds)[0]["median_s"]
    from rooftune.runconfig import load_config

    instances = load_config(config).instances
    return 1.0 / sum(r["items_per_s"] for r in replay(config, seconds, instances))


def main() -> None:
    from rooftune.bench import stats
    from rooftune.platform import current_platform

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="default: rooftune optimize's own default")
    ap.add_argument("--budget", type=float, default=None, help="default: rooftune optimize's own default")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3.0, help="measurement budget of one replay")
    ap.add_argument("--out", default="/tmp/rooftune-optimize-bench")
    ap.add_argument("--db", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--int8", action="store_true", help="let the tuning choose int8")
    ap.add_argument("--objective", default="latency", choices=("latency", "throughput"))
    args = ap.parse_args()
    if args.rounds < 6:
        raise SystemExit(f"error: --rounds {args.rounds}: allowed 6 or more (fewer give no 95 % interval)")

    out = Path(args.out)
    cmd = [*ROOFTUNE, "optimize", *([args.model] if args.model else []), "--out", str(out), "--json",
           "--objective", args.objective]
    if args.budget:
        cmd += ["--budget", str(args.budget)]
    if args.db:
        cmd += ["--db", args.db]
    if args.int8:
        cmd.append("--int8")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=clean_env())
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"rooftune optimize failed ({p.returncode}): {p.stderr.strip()[-600:]}")
    summary = json.loads(p.stdout)
    reported = summary["speedup_vs_vanilla"]
    steps = {s["name"]: (s["status"], round(s["seconds"], 1)) for s in summary["steps"]}
    print(f"rooftune optimize {summary['model']}: {wall:.0f} s wall clock (target <= 600 s); steps {steps}")
    print(f"reported: {summary['headline']}")

    best, vanilla = out / "best.json", out / "vanilla.json"
    a: list[float] = []  # vanilla per-round medians
    b: list[float] = []  # best per-round medians
    unit = "ms" if args.objective == "latency" else "ms a sample"
    for i in range(args.rounds):
        a.append(figure(vanilla, args.seconds, args.objective))
        b.append(figure(best, args.seconds, args.objective))
        print(f"round {i + 1}: vanilla {a[-1] * 1e3:.2f} {unit}, best {b[-1] * 1e3:.2f} {unit}, ratio {a[-1] / b[-1]:.3f}")
    ratio = stats.median(a) / stats.median(b)
    lo, hi = stats.comparison_ci(a, b)
    agreement = ratio / reported["ratio"]
    ok = abs(agreement - 1) <= 0.10
    print(f"reproduced by rooftune exec: {ratio:.3f}x (95 % CI {lo:.3f}-{hi:.3f}) over {args.rounds} rounds; "
          f"reported {reported['ratio']:.3f}x ({reported['ci_low']:.3f}-{reported['ci_high']:.3f}); "
          f"reproduced/reported = {agreement:.3f} ({'within' if ok else 'NOT within'} 10 %)")
    platform = current_platform()
    result = {
        "date": time.strftime("%Y-%m-%d"), "platform_id": platform.id, "cpu": platform.cpu_model,
        "usable_cores": platform.usable_cores, "model": summary["model"], "objective": args.objective,
        "wall_s": wall, "steps": steps,
        "best": summary["tune"]["best"]["description"] if summary.get("tune") else None,
        "reported": reported, "reproduced": {"ratio": ratio, "ci_low": lo, "ci_high": hi, "vanilla_s": a, "best_s": b},
        "agreement": agreement, "within_10pct": ok, "within_10min": wall <= 600,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
