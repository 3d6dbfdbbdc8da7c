"""Why ncnn's lead turns over in the host's slow stretches: ncnn and ONNX Runtime, on two threads
and on one, timed in turn in one process for SECONDS.

    .venv/bin/python benchmarks/ncnn_stretches.py [MODEL] [--seconds 60] [--window 0.4] [--json OUT]

Each variant is loaded as `rooftune.load_tuned` loads a configuration (ncnn with its Winograd
kernels; ONNX Runtime's defaults but the threads), and each round times every variant for
WINDOW seconds with the harness (`rooftune.bench.measure`, one call per sample), one after the
other, so the four medians of a round share the host's moment. A round is called slow where
ncnn's two threads ran within SLOW_SPEEDUP of its one thread (the second vCPU bought it almost
nothing). Printed: every round's medians, then per kind of round the median of ncnn's
two-thread time over ONNX Runtime's and of each variant's time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

#: ncnn's 2-thread speedup over its 1 thread below which a round counts as slow (on a quiet
#: stretch it is 1.7x on googlenet; in a slow one 1.0-1.1x).
SLOW_SPEEDUP = 1.3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="googlenet")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--window", type=float, default=0.4)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import rooftune
    from rooftune.bench import Policy, measure
    from rooftune.platform import current_platform
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import RunConfig

    platform = current_platform()
    for rt in ("ncnn", "onnxruntime"):
        why = get_runtime(rt).available()
        if why:
            print(f"{rt} is not available: {why}", file=sys.stderr)
            return 1
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}; {args.model}, "
          f"rounds of {args.window:g} s per variant for {args.seconds:g} s")
    variants = {"ncnn 2": RunConfig(runtime="ncnn", intra_threads=2, runtime_options={"conv": "winograd"}),
                "ncnn 1": RunConfig(runtime="ncnn", intra_threads=1, runtime_options={"conv": "winograd"}),
                "ort 2": RunConfig(runtime="onnxruntime", intra_threads=2),
                "ort 1": RunConfig(runtime="onnxruntime", intra_threads=1)}
    policy = Policy(number=1, warmup_s=0.05, budget_s=args.window, min_samples=6, target_rel_ci=0.0)
    with tempfile.TemporaryDirectory() as d:
        runs = {}
        for name, cfg in variants.items():
            path = Path(d) / f"{name.replace(' ', '-')}.json"
            path.write_text(json.dumps({"config": cfg.to_dict(),
                                        "workload": {"model": args.model, "inputs": None, "options": {}}}))
            runs[name] = rooftune.load_tuned(path).run
        rounds: list[dict[str, float]] = []
        end = time.monotonic() + args.seconds
        print("  ".join(f"{n:>8}" for n in variants), " kind")
        while time.monotonic() < end:
            row = {n: measure(run, label=n, policy=policy).median for n, run in runs.items()}
            row["slow"] = float(row["ncnn 1"] / row["ncnn 2"] < SLOW_SPEEDUP)
            rounds.append(row)
            print("  ".join(f"{row[n] * 1e3:6.1f}ms" for n in variants), " slow" if row["slow"] else " fast", flush=True)
    summary = {}
    for kind, flag in (("fast", 0.0), ("slow", 1.0)):
        rs = [r for r in rounds if r["slow"] == flag]
        if not rs:
            print(f"{kind} rounds: none")
            continue
        s = {"rounds": len(rs), "ncnn2_over_ort2": statistics.median(r["ncnn 2"] / r["ort 2"] for r in rs),
             **{f"{n} ms": statistics.median(r[n] for r in rs) * 1e3 for n in variants}}
        summary[kind] = s
        print(f"{kind} rounds: {len(rs)}; ncnn 2 threads / ONNX Runtime 2 threads {s['ncnn2_over_ort2']:.2f}; medians "
              + ", ".join(f"{n} {s[f'{n} ms']:.1f} ms" for n in variants))
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "platform_id": platform.id,
                                               "model": args.model, "rounds": rounds, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
