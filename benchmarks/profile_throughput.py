"""Profiling throughput and repeatability: every applicable primitive on every convolution of
resnet50 + mobilenet_v2 at batch 1, 2 threads, twice, into two fresh stores.

    .venv/bin/python benchmarks/profile_throughput.py [--models resnet50,mobilenet_v2] [--threads 2] [--json OUT]

Targets (issue "A library of convolution primitives and resumable profiling campaigns"):
  * the campaign takes <= 10 minutes on a 2-core machine;
  * a second campaign over the same specs agrees within 5 % on >= 90 % of the timed rows.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=None, help="passes per campaign (default: the campaign's default)")
    ap.add_argument("--extra-passes", type=int, default=None,
                    help="confirmation passes over unconfirmed rows (default: the campaign's default)")
    ap.add_argument("--budget", type=float, default=580.0,
                    help="each campaign's budget in seconds (it stops between specs once spent; default 580)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from rooftune.bench.canary import fastest_reading, is_quiet
    from rooftune.platform import current_platform
    from rooftune.profiling import EXTRA_PASSES, PROFILE_PASSES, profile, summarize
    from rooftune.store import Store

    platform = current_platform()
    passes = PROFILE_PASSES if args.passes is None else args.passes
    extra = EXTRA_PASSES if args.extra_passes is None else args.extra_passes
    models = [m for m in args.models.split(",") if m]
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}; "
          f"{', '.join(models)} at batch 1, {args.threads} threads, {passes} passes per campaign, "
          f"up to {extra} confirmation passes")
    tmp = Path(tempfile.mkdtemp(prefix="rooftune-profile-bench-"))
    runs = []
    for i in (1, 2):
        db = str(tmp / f"run{i}.db")
        t0 = time.perf_counter()
        result, layers = profile(models, batches=[1], threads=[args.threads], db=db, passes=passes, extra_passes=extra,
                                 budget_s=args.budget)
        wall = time.perf_counter() - t0
        with Store(db) as s:
            rows = s.profiles()
        runs.append((rows, wall, result, layers))
        c = result.counts
        print(f"campaign {i}: {wall:.0f} s, {len({r['spec_key'] for r in rows})} specs, {c['ok']} timed, "
              f"{c['unsupported']} unsupported, {c['failed']} failed (target <= 600 s); {result.extra_run} confirmation "
              f"passes, {result.unconfirmed} rows left unconfirmed; {result.quiet_rows} rows timed on a quiet "
              f"machine at least once, {result.waited_s:.0f} s waited for quiet; probe median "
              + (f"{result.probe_median:.2f}x its fastest, quiet on {result.probe_quiet_share:.0%} of readings"
                 if result.probe_median is not None else "-")
              + (" [stopped by the budget]" if result.stopped_by_budget else ""), flush=True)
        if i == 1:
            for r in rows:
                if r["status"] == "failed":
                    print(f"  failed: {r['primitive']} on {r['spec_key']}: {r['reason'][:100]}")
            for s in summarize(rows, layers):
                wins = ", ".join(f"{k} {v}" for k, v in s["wins"].items())
                print(f"  {s['model']}: per-layer best {s['best_s'] * 1e3:.2f} ms vs pytorch-default "
                      f"{s['baseline_s'] * 1e3:.2f} ms = {s['speedup']:.2f}x; winners: {wins}")

    def by_row(rows: list, value: Any) -> dict:  # (spec, primitive) -> value(row), over the ok rows
        return {(r["spec_key"], r["primitive"]): value(r) for r in rows if r["status"] == "ok"}

    def share(ratios: list[float], tol: float, empty: float = 0.0) -> float:
        return sum(1 for q in ratios if abs(q - 1) <= tol) / len(ratios) if ratios else empty

    first, second = (by_row(rows, lambda r: r["median_s"]) for rows, *_ in runs)
    common = sorted(set(first) & set(second))
    ratios = [second[k] / first[k] for k in common]
    within, within10 = share(ratios, 0.05), share(ratios, 0.10)
    # The same two campaigns read as if they had stopped after the fixed passes (the fastest of
    # the first `passes` pass medians of every row): what the confirmation passes changed.
    f1, f2 = (by_row(rows, lambda r: min((r.get("pass_medians") or [r["median_s"]])[:passes])) for rows, *_ in runs)
    fwithin = share([f2[k] / f1[k] for k in common], 0.05)
    kwithin = share([second[k] / first[k] for k in common if not k[1].startswith("transform:")], 0.05)
    # The fastest single sample of each row's passes (stored beside the median since schema 8).
    fast1, fast2 = (by_row(rows, lambda r: r.get("fastest_s")) for rows, *_ in runs)
    sr = [fast2[k] / fast1[k] for k in common if fast1.get(k) and fast2.get(k)]
    swithin, swithin10 = share(sr, 0.05, math.nan), share(sr, 0.10, math.nan)
    print("\n# summary")
    print(f"campaign wall time: {runs[0][1]:.0f} s and {runs[1][1]:.0f} s (target <= 600)")
    print(f"rows agreeing within 5 %: {within:.1%} of {len(ratios)} (target >= 90 %); within 10 %: {within10:.1%}; "
          f"primitives only (no transforms): {kwithin:.1%}; median ratio {statistics.median(ratios):.3f}")
    print(f"the same campaigns after their {passes} fixed passes only: {fwithin:.1%} within 5 %")
    print(f"the rows' fastest samples (fastest_s): within 5 % {swithin:.1%} of {len(sr)}, within 10 % {swithin10:.1%}")
    # Rows each campaign timed at least once while the probe read quiet, against the rest.
    def quiet(rows: list) -> set:
        ref = fastest_reading(c for r in rows for c in r.get("pass_canary") or [])
        return {(r["spec_key"], r["primitive"]) for r in rows
                if r["status"] == "ok" and any(is_quiet(c, ref) for c in r.get("pass_canary") or [])}

    both = quiet(runs[0][0]) & quiet(runs[1][0])
    qr = [second[k] / first[k] for k in common if k in both]
    rest = [second[k] / first[k] for k in common if k not in both]
    print(f"rows timed quiet in both campaigns: {len(qr)}, {share(qr, 0.05, math.nan):.1%} within 5 %; "
          f"the other {len(rest)}: {share(rest, 0.05, math.nan):.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "wall_s": [r[1] for r in runs], "within_5pct": within, "within_10pct": within10, "rows": len(ratios),
            "within_5pct_fixed_passes_only": fwithin, "fastest_s_within_5pct": swithin,
            "fastest_s_within_10pct": swithin10, "confirmation_passes": [r[2].extra_run for r in runs],
            "unconfirmed": [r[2].unconfirmed for r in runs],
            "counts": [r[2].counts for r in runs]}, indent=2))
    return 0 if max(r[1] for r in runs) <= 600 and within >= 0.9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
