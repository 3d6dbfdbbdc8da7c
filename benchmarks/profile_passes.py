"""How many passes a profiling campaign needs: every applicable primitive and transform on every
convolution of resnet50 + mobilenet_v2 (batch 1, 2 threads), timed once per pass over the whole
campaign, in P passes (default 6) in one process. Then, for g = 1, 2, 3, the fastest (and the
median) of g passes is compared with that of g other passes: the share of rows agreeing within
5 % and 10 %, averaged over every split of the passes into two disjoint groups.

    .venv/bin/python benchmarks/profile_passes.py [--passes 6] [--models resnet50,mobilenet_v2] [--threads 2] [--json OUT]

It chose `rooftune.profiling.campaign.PROFILE_PASSES` (the repeatability target of the profiling
issue: a second campaign agrees within 5 % on >= 90 % of rows; see profile_throughput.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path


def agreement(times: dict[tuple[str, str], list[float]], a: tuple[int, ...], b: tuple[int, ...], how) -> tuple[float, float]:
    ratios = [how([v[p] for p in b]) / how([v[p] for p in a]) for v in times.values()]
    return (sum(abs(q - 1) <= 0.05 for q in ratios) / len(ratios), sum(abs(q - 1) <= 0.10 for q in ratios) / len(ratios))


def setup(doc: str) -> tuple[argparse.Namespace, list, list]:
    """The command line of the passes scripts (--passes, --models, --threads, --json), the header
    line, the threads set, and the campaign's specs and primitives."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from rooftune.platform import current_platform
    from rooftune.primitives import all_primitives
    from rooftune.profiling import collect_specs

    platform = current_platform()
    models = [m for m in args.models.split(",") if m]
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}; "
          f"{', '.join(models)} at batch 1, {args.threads} threads, {args.passes} passes", flush=True)
    torch.set_num_threads(args.threads)
    specs, _ = collect_specs(models, 0, [1])
    return args, specs, all_primitives(None)


def main() -> int:
    from rooftune.profiling import profile_spec

    args, specs, prims = setup(__doc__)
    times: dict[tuple[str, str], list[float]] = {}
    for p in range(args.passes):
        t0 = time.perf_counter()
        for spec, sources in specs:
            for r in profile_spec(spec, prims, args.threads, sources):
                if r["status"] == "ok":
                    times.setdefault((r["spec_key"], r["primitive"]), []).append(r["median_s"])
        print(f"pass {p + 1}: {time.perf_counter() - t0:.0f} s", flush=True)
    times = {k: v for k, v in times.items() if len(v) == args.passes}
    print(f"\n# {len(times)} rows timed in every pass")
    result = {}
    for g in range(1, args.passes // 2 + 1):
        for name, how in (("fastest", min), ("median", statistics.median)):
            splits = [(a, b) for a in itertools.combinations(range(args.passes), g)
                      for b in itertools.combinations([p for p in range(args.passes) if p not in a], g) if min(a) < min(b)]
            got = [agreement(times, a, b, how) for a, b in splits]
            w5 = [x[0] for x in got]
            w10 = [x[1] for x in got]
            result[f"{name}_of_{g}"] = {"within_5pct": statistics.mean(w5), "within_10pct": statistics.mean(w10),
                                        "range_5pct": [min(w5), max(w5)], "splits": len(splits)}
            print(f"{name} of {g} against {name} of {g} other passes: within 5 % {statistics.mean(w5):.1%} "
                  f"(splits {min(w5):.1%}-{max(w5):.1%}), within 10 % {statistics.mean(w10):.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
