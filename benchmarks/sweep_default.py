"""Kernel-family sweeps against their targets (issue 66): the wall time of each study, and sanity
ratios of its points. Each study runs into a fresh store (nothing resumed), against the ceilings
stored in ``--db`` (measured there first if missing). Run it with no other timing on the host:

    .venv/bin/python benchmarks/sweep_default.py --db STORE \
        [--part default|conv100|lstm30|passes] [--threads N] [--json OUT]

Parts:
    default   the default studies of conv2d and lstm (no options: batch, channels/hidden,
              kernel/sequence length; fp32 and bf16; NCHW and NHWC for conv2d), with their findings
    conv100   a 100-point conv2d forward sweep (batch 1..16 x channels 8..128 x kernel 1,3,5,7,
              14x14, fp32 NCHW): target <= 120 s on 2 cores
    lstm30    a 30-point LSTM forward sweep (batch 1,4,16 x hidden 64..1024 x seq_len 16,64):
              target <= 60 s
    passes    the 30-point LSTM sweep in fwd, bwd and step: target at most 2x the forward's time

Per study: wall time, points, the share of points whose 95 % interval is within +-5 %, the
attained FLOP/s over the roof (efficiency: median and largest, which must stay near or below 1),
the bounds, and the findings (crossovers stated with the parameter value).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

STUDIES: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {
    "default": [("conv2d", {}, {}), ("lstm", {}, {})],
    "conv100": [("conv2d", {"batch": "1:16:*2", "channels": "8:128:*2", "kernel": "1,3,5,7", "size": 14},
                 {"precisions": ["fp32"], "layouts": ["NCHW"]})],
    "lstm30": [("lstm", {"batch": "1,4,16", "hidden": "64:1024:*2", "seq_len": "16,64"}, {"precisions": ["fp32"]})],
    "passes": [("lstm", {"batch": "1,4,16", "hidden": "64:1024:*2", "seq_len": "16,64"},
                {"precisions": ["fp32"], "passes": ["fwd", "bwd", "step"]})],
}


def study(family: str, grid: dict[str, Any], options: dict[str, Any], ceilings: Any) -> dict[str, Any]:
    import rooftune

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        r = rooftune.sweep.sweep(family, grid or None, ceilings=ceilings, db=str(Path(tmp) / "sweep.db"), **options)
        wall = time.perf_counter() - started
    ok = r.ok_points
    eff = [p.efficiency for p in ok if p.efficiency is not None]
    within = [p for p in ok if p.rel_ci is not None and p.rel_ci <= 0.05]
    bounds: dict[str, int] = {}
    for p in ok:
        bounds[p.bound] = bounds.get(p.bound, 0) + 1
    return {
        "family": family, "grid": grid, "options": options, "wall_s": round(wall, 1), "points": len(r.points),
        "ok": len(ok), "failed": len(r.points) - len(ok), "skipped": len(r.skipped),
        "ci_within_5pct": f"{len(within)}/{len(ok)}",
        "efficiency_median": round(statistics.median(eff), 3) if eff else None,
        "efficiency_max": round(max(eff), 3) if eff else None,
        "bounds": bounds, "findings": list(r.findings), "platform_id": r.platform_id,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True, help="Store holding this machine's ceilings (measured if missing).")
    parser.add_argument("--part", choices=sorted(STUDIES), default="default")
    parser.add_argument("--threads", type=int, help="Thread count of every point (default: all usable cores).")
    parser.add_argument("--json", help="Write the results here.")
    args = parser.parse_args()
    from rooftune.machine import get_ceilings

    ceilings = get_ceilings(db=args.db)
    extra = {"threads": args.threads} if args.threads else {}
    results = [study(f, g, {**o, **extra}, ceilings) for f, g, o in STUDIES[args.part]]
    for res in results:
        print(f"{res['family']} {args.part}: {res['points']} points ({res['ok']} ok, {res['failed']} failed, "
              f"{res['skipped']} skipped) in {res['wall_s']} s; CI within +-5 %: {res['ci_within_5pct']}; "
              f"attained/roof median {res['efficiency_median']}, max {res['efficiency_max']}; bounds {res['bounds']}")
        for line in res["findings"]:
            print(f"  - {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
