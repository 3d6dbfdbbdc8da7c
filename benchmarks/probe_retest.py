"""Do profiled times repeat across days once brought to the quiet machine? Compares the rows of
a campaign run again (``--again``, a fresh store) with the same rows of an earlier store (``--db``),
as stored and divided by (probe at the fastest pass / the earlier store's fastest reading) ** e
for each exponent e (``rooftune.perfmodel.data.probe_factor``, the earlier store's reference for
both, as the performance model's data does).

    rooftune profile --models googlenet,squeezenet1_0,resnet18 --threads 2 --db /tmp/again.db
    .venv/bin/python benchmarks/probe_retest.py --db /tmp/pm20.db --again /tmp/again.db \\
        --platform e585d95f14c7adbc [--threads 2] [--exponents 0,0.3,0.5,0.7,1] [--json OUT]

Per exponent: the pairs' share within +-10 % and +-5 % of each other and their median ratio, and
the share within +-10 % per primitive; per spec, whether both campaigns name the same fastest
primitive (the top-1 accuracy a model that predicted the earlier campaign exactly would score
against the later one) and that choice's regret. A prediction is scored against one measurement: a primitive
whose own rows repeat within 10 % only half the time cannot be predicted within 10 % much more often.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def times(rows: Sequence[Mapping[str, Any]], reference: float | None, exponent: float) -> dict[tuple[str, str], float]:
    from rooftune.perfmodel.data import probe_factor

    return {(r["spec_key"], r["primitive"]): float(r["median_s"]) / probe_factor(r, reference, exponent)
            for r in rows if r["status"] == "ok" and r.get("median_s") and not r["primitive"].startswith("transform:")}


def compare(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], exponents: Sequence[float]) -> dict[str, Any]:
    from rooftune.perfmodel.data import probe_factor, probe_reference

    reference = probe_reference(old)
    again = {r["spec_key"] for r in new}

    def median_factor(rows: Sequence[Mapping[str, Any]]) -> float:
        f = [probe_factor(r, reference, 1.0) for r in rows if r["status"] == "ok" and r.get("pass_canary")]
        return float(np.median(f)) if f else float("nan")

    out: dict[str, Any] = {"reference": reference,
                           "probe_factor_median": {"earlier": median_factor([r for r in old if r["spec_key"] in again]),
                                                   "again": median_factor(new)},
                           "exponents": {}}
    for e in exponents:
        a, b = times(old, reference, e), times(new, reference, e)
        common = sorted(set(a) & set(b))
        if not common:
            continue
        d = np.log(np.asarray([b[k] / a[k] for k in common]))
        rel = np.abs(np.expm1(d))
        per = {}
        for p in sorted({k[1] for k in common}):
            m = np.asarray([k[1] == p for k in common])
            per[p] = {"pairs": int(m.sum()), "within_10pct": float(np.mean(rel[m] <= 0.10)),
                      "median_ratio": float(np.exp(np.median(d[m])))}
        out["exponents"][str(e)] = {"pairs": len(common), "within_10pct": float(np.mean(rel <= 0.10)),
                                    "within_5pct": float(np.mean(rel <= 0.05)),
                                    "median_ratio": float(np.exp(np.median(d))), "by_primitive": per,
                                    **fastest_agreement(a, b, common)}
    return out


def fastest_agreement(a: Mapping[tuple[str, str], float], b: Mapping[tuple[str, str], float],
                      common: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Per spec timed with at least two primitives in both: whether both campaigns name the same
    fastest primitive, and the regret of the earlier one's choice on the later times (the top-1
    and regret of :func:`regression_metrics` for a model that predicted the earlier campaign exactly)."""
    from rooftune.perfmodel.evaluate import regression_metrics

    prims = sorted({p for _, p in common})
    specs = sorted({s for s, _ in common})
    row, col = {s: i for i, s in enumerate(specs)}, {p: j for j, p in enumerate(prims)}
    earlier, later = np.full((len(specs), len(prims)), np.nan), np.full((len(specs), len(prims)), np.nan)
    for k in common:
        earlier[row[k[0]], col[k[1]]], later[row[k[0]], col[k[1]]] = a[k], b[k]
    two = np.sum(~np.isnan(later), axis=1) >= 2
    if not two.any():
        return {}
    m = regression_metrics(earlier[two], later[two])
    return {"specs": m["specs"], "same_fastest": m["top1"], "fastest_within_5pct": m["top1_within_5pct"],
            "regret_mean": m["regret_mean"], "regret_worst": m["regret_worst"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the earlier store")
    ap.add_argument("--again", required=True, help="the store of the campaign run again")
    ap.add_argument("--platform", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--exponents", default="0,0.3,0.5,0.7,1")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from rooftune.store import Store

    def rows(path: str) -> list[Mapping[str, Any]]:
        with Store(path) as s:
            return [r for r in s.profiles(args.platform) if int(r["threads"]) == args.threads]

    old, new = rows(args.db), rows(args.again)
    if not old or not new:
        raise SystemExit(f"error: no rows of platform {args.platform} at {args.threads} threads in "
                         f"{args.db if not old else args.again}")
    result = compare(old, new, [float(x) for x in args.exponents.split(",")])
    f = result["probe_factor_median"]
    print(f"probe at the fastest pass over the earlier store's fastest reading (median): "
          f"earlier rows {f['earlier']:.2f}, again {f['again']:.2f}")
    for e, r in result["exponents"].items():
        print(f"exponent {e}: {r['pairs']} pairs, within 10 % {r['within_10pct']:.1%}, within 5 % "
              f"{r['within_5pct']:.1%}, median ratio again/earlier {r['median_ratio']:.3f}")
        print("   " + ", ".join(f"{p} {v['within_10pct']:.0%}" for p, v in r["by_primitive"].items()))
        if r.get("specs"):
            print(f"   the same fastest primitive on {r['same_fastest']:.1%} of {r['specs']} specs (the earlier "
                  f"one within 5 % of the best on {r['fastest_within_5pct']:.1%}); its regret on the later "
                  f"times mean {r['regret_mean']:.1%}, worst {r['regret_worst']:.1%}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
