"""Replays the confirmation rule of a campaign on two stores profiled with confirmation passes
(`benchmarks/profile_throughput.py` leaves them in /tmp/rooftune-profile-bench-*/run{1,2}.db):
for each threshold and number of confirmation passes, what the two campaigns would have agreed
on, and what it costs (confirmation row-passes per row). Exact for thresholds at least as loose,
and as many passes at most, as the campaigns ran with: a row's first passes are its prefix.

    .venv/bin/python benchmarks/profile_confirm_rule.py DIR [--passes 3]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path


def load(db: Path) -> dict[tuple[str, str, int], list[float]]:
    with sqlite3.connect(db) as c:
        rows = c.execute("select spec_key, primitive, threads, pass_medians from profiles"
                         " where status = 'ok'")
        return {(k, p, t): json.loads(m) for k, p, t, m in rows}


def replay(medians: list[float], confirm: float, extra: int, passes: int) -> tuple[float, int]:
    """The row's estimate (fastest pass) and the confirmation passes it would have taken."""
    used = medians[:passes]
    while len(used) < min(passes + extra, len(medians)):
        s = sorted(used)
        if len(s) >= 2 and s[1] <= confirm * s[0]:
            break
        used = medians[:len(used) + 1]
    return min(used), len(used) - passes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    a, b = load(Path(args.dir) / "run1.db"), load(Path(args.dir) / "run2.db")
    common = sorted(set(a) & set(b))
    print(f"# {len(common)} rows timed in both campaigns; {args.passes} fixed passes")
    for confirm in (1.03, 1.05, 1.10, 1.20):
        for extra in (0, 1, 2, 3):
            ea = {k: replay(a[k], confirm, extra, args.passes) for k in common}
            eb = {k: replay(b[k], confirm, extra, args.passes) for k in common}
            ratios = [eb[k][0] / ea[k][0] for k in common]
            w5 = sum(abs(q - 1) <= 0.05 for q in ratios) / len(ratios)
            w10 = sum(abs(q - 1) <= 0.10 for q in ratios) / len(ratios)
            cost = (sum(v[1] for v in ea.values()) + sum(v[1] for v in eb.values())) / 2 / len(common)
            print(f"confirm within {(confirm - 1) * 100:2.0f} %, up to {extra} passes: within 5 % {w5:.1%}, "
                  f"within 10 % {w10:.1%}; {cost:.2f} confirmation row-passes per row")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
