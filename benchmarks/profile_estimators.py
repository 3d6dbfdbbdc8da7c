"""Which statistic of a row's samples repeats best on a shared host: every applicable primitive and
transform on every convolution of resnet50 + mobilenet_v2 (batch 1, 2 threads) timed once per pass
over the whole campaign, P passes (default 6) in one process, each measurement's raw samples kept.
Then, for g = 1..3 passes against g other passes (every split of the passes into two disjoint
groups), the share of rows agreeing within 5 % and 10 % when a row's time is:

- ``fastest-median``: the fastest pass's median (what a campaign stores);
- ``min``: the fastest sample of all the group's passes;
- ``p10`` / ``p25``: that quantile of the group's samples pooled;
- ``fastest-p25``: the fastest pass's 25th percentile.

    .venv/bin/python benchmarks/profile_estimators.py [--passes 6] [--models resnet50,mobilenet_v2] [--threads 2] [--json OUT]

Companion of profile_passes.py (which chose the number of passes) and profile_throughput.py (the
repeatability target of the profiling issue: a second campaign agrees within 5 % on >= 90 % of rows).
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from pathlib import Path


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = q * (len(s) - 1)
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


ESTIMATORS = {
    "fastest-median": lambda passes: min(statistics.median(p) for p in passes),
    "fastest-p25": lambda passes: min(quantile(p, 0.25) for p in passes),
    "min": lambda passes: min(min(p) for p in passes),
    "p10": lambda passes: quantile([x for p in passes for x in p], 0.10),
    "p25": lambda passes: quantile([x for p in passes for x in p], 0.25),
}


def main() -> int:
    from profile_passes import setup

    from rooftune.profiling import profile_spec, work

    args, specs, prims = setup(__doc__)
    samples: dict[tuple[str, str], list[list[float]]] = {}
    inner = work.measure  # (profile_spec times in this process by default)
    current: dict[str, str] = {}

    def keep(*a, **kw):
        m = inner(*a, **kw)
        samples.setdefault((current["spec"], m.label), []).append(list(m.samples))
        return m

    work.measure = keep
    for p in range(args.passes):
        t0 = time.perf_counter()
        for spec, sources in specs:
            current["spec"] = spec.key()
            profile_spec(spec, prims, args.threads, sources)
        print(f"pass {p + 1}: {time.perf_counter() - t0:.0f} s", flush=True)
    rows = {k: v for k, v in samples.items() if len(v) == args.passes}
    n = statistics.median(len(s) for v in rows.values() for s in v)
    print(f"\n# {len(rows)} rows timed in every pass; median {n:.0f} samples per measurement")
    result: dict[str, dict[str, float]] = {}
    for g in range(1, args.passes // 2 + 1):
        splits = [(a, b) for a in itertools.combinations(range(args.passes), g)
                  for b in itertools.combinations([p for p in range(args.passes) if p not in a], g) if min(a) < min(b)]
        for name, est in ESTIMATORS.items():
            w5, w10 = [], []
            for a, b in splits:
                q = [est([v[i] for i in b]) / est([v[i] for i in a]) for v in rows.values()]
                w5.append(sum(abs(x - 1) <= 0.05 for x in q) / len(q))
                w10.append(sum(abs(x - 1) <= 0.10 for x in q) / len(q))
            result[f"{name}_of_{g}"] = {"within_5pct": statistics.mean(w5), "within_10pct": statistics.mean(w10)}
            print(f"{g} vs {g} passes, {name:15s} within 5 % {statistics.mean(w5):6.1%} "
                  f"(splits {min(w5):.1%}-{max(w5):.1%}), within 10 % {statistics.mean(w10):6.1%}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"result": result, "samples": {f"{k[0]}|{k[1]}": v for k, v in rows.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
