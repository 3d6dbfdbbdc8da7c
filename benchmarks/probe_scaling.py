"""How far to bring busy-host profiled times toward the quiet machine: the exponent of the probe.

    .venv/bin/python benchmarks/probe_scaling.py --db PROFILES.db [--platform ID] [--exponents 0,0.3,0.5,0.7,1]
        [--seeds 0,1,2] [--threads 1] [--json OUT]

`rooftune.perfmodel.data` divides each profiled time by (the probe's reading at the row's fastest
pass / the platform's fastest reading) ** PROBE_ELASTICITY. This script measures what that
exponent does to predictions of rows measured on a quiet host: the networks whose rows had their
fastest pass at a median probe factor <= 1.05 (exponent 1) are held out one at a time, and their
rows are scored as stored (not scaled), while the training rows (the other networks, quiet or
busy, and the sampled specs) are scaled with each exponent. The mlp as `rooftune train` fits it,
one net per seed and the mean of the seeds' log predictions. A store whose networks were all
profiled on a quiet host shows no difference; one that mixes busy and quiet campaigns does.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--platform", default=None, help="profiled platform (default: this machine)")
    ap.add_argument("--exponents", default="0,0.3,0.5,0.7,1")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=None, help="torch threads for the fits (default: torch's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from rooftune.perfmodel import PerfModel, load_profile_data, regression_metrics, rows_to_data
    from rooftune.perfmodel.evaluate import folds, predict_for
    from rooftune.perfmodel.features import cache_sizes
    from rooftune.store import Store

    if args.threads:
        torch.set_num_threads(args.threads)
    exponents = [float(x) for x in args.exponents.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    with Store(args.db) as s:
        stored = load_profile_data(s, args.platform, probe_exponent=0)
        rows = s.profiles(stored.platform_id)  # read once; each exponent's data built from them

    def scaled_by(e: float):
        return rows_to_data(rows, stored.platform_id, stored.threads, fingerprint=stored.fingerprint, probe_exponent=e)

    full = scaled_by(1)
    scaled = {e: scaled_by(e) for e in exponents}
    factor = {}
    for net in full.networks:
        rows = full.of_network(net)
        f = full.probe_factor[rows][~np.isnan(full.times[rows])]
        factor[net] = float(np.median(f))
    quiet = [n for n, f in factor.items() if f <= 1.05]
    print(f"# platform {stored.platform_id}: {len(stored)} specs, {len(stored.networks)} networks, {stored.threads} threads")
    print("# median probe factor of each network's rows: " + ", ".join(f"{n} {f:.2f}" for n, f in sorted(factor.items())))
    print(f"# held out in turn and scored as stored (quiet, <= 1.05): {', '.join(quiet)}")
    if not quiet:
        print("no network was profiled on a quiet host: nothing to score against")
        return 1
    caches = cache_sizes(stored.fingerprint)
    out: dict = {"platform": stored.platform_id, "factor": factor, "quiet": quiet, "results": {}}
    test_folds = folds(stored, quiet)
    for e in exponents:
        t0 = time.perf_counter()
        logs, truth = [], None
        for seed in seeds:
            preds, trues = [], []
            for (net, train, _), (net2, _, test) in zip(folds(scaled[e], quiet), test_folds):
                assert net == net2
                m = PerfModel("mlp", n_nets=1, random_state=seed).fit(train.specs, train.times, train.primitives,
                                                                      caches=caches, threads=stored.threads)
                preds.append(np.log(predict_for(m, test)))
                trues.append(test.times)
            logs.append(np.vstack(preds))
            truth = np.vstack(trues)
        rows = {f"seed {s}": regression_metrics(np.exp(L), truth) for s, L in zip(seeds, logs)}
        rows["mean"] = regression_metrics(np.exp(np.mean(logs, axis=0)), truth)
        out["results"][str(e)] = {k: {m: v[m] for m in ("within_10pct", "mape", "spearman", "top1", "regret_mean")}
                                  for k, v in rows.items()}
        for name, r in rows.items():
            print(f"exponent {e:<4g} {name:7s} within10 {r['within_10pct']:.1%}  MAPE {r['mape']:.1%}  "
                  f"Spearman {r['spearman']:.3f}  top-1 {r['top1']:.1%}  regret mean {r['regret_mean']:.1%}", flush=True)
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
