"""Which shipped base model selects better on this machine: each one's selection, measured.

    .venv/bin/python benchmarks/base_models.py [--models resnet34,wide_resnet50_2,mobilenet_v3_small,regnet_y_800mf]
        [--budget 8] [--db PROFILES.db] [--against MODEL.rtmodel] [--json OUT]

For every network (by default ones no shipped base model was trained on), each shipped base model
selects a primitive per convolution (layout-aware, as `rooftune select` does); each rewritten
network is verified against the original, then the two selections and vanilla PyTorch are timed
interleaved by the harness, pair by pair: the ratio of the selection of the base model
`rooftune select` would take on this machine (the nearest) over the other one's, with its CI.
No profiling: the selections come from predictions alone, and a primitive on a thread pool of
its own or a fast algorithm (Winograd, FFT) stays in one only if the network measured faster with it (as
`rooftune select` decides). With ``--db``, each base model is also
scored per layer, and per primitive, against the times profiled on this machine in that store,
on the layers of ``--models`` that no other network in the store has (all of the store's rows
when none is); a base model trained on those rows is scored on what it has seen: the line says so. With ``--against``, the nearest
shipped base is compared with that saved model (`rooftune train --save`) instead: a candidate
base model, or an earlier one.

Target: none stated (BENCHMARKS.md, "Which shipped base model selects better"): the nearest
base is the default, not a guaranteed win; the script states by how much its selections run
faster or slower than another base's, and whether a candidate base selects as well as the
shipped one it would replace.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from importlib import resources
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet34,wide_resnet50_2,mobilenet_v3_small,regnet_y_800mf")
    ap.add_argument("--budget", type=float, default=8.0, help="seconds per interleaved comparison")
    ap.add_argument("--db", default=None, help="a store with this machine's profiled rows: score each base per layer")
    ap.add_argument("--against", default=None, help="a saved model file to compare the nearest base with")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from rooftune.bench import compare
    from rooftune.perfmodel import base_model_path, base_model_paths, describe_base, load_model
    from rooftune.platform import current_platform
    from rooftune.selection import comparison_policy, module_runner, select
    from rooftune.workload import load_workload

    here = current_platform()
    torch.set_num_threads(here.usable_cores)
    nearest = base_model_path(here).name
    bases = {}
    for p in base_model_paths():
        with resources.as_file(p) as f:
            bases[p.name] = load_model(f)
    order = [nearest] + [n for n in bases if n != nearest]
    if args.against:
        against = Path(args.against)
        label = f"{against.name} (--against)"
        bases[label] = load_model(against)
        order = [nearest, label]
    if len(order) < 2:
        print(f"only one base model is installed ({nearest}): nothing to compare")
        return 1
    uarch = f" ({here.microarchitecture})" if here.microarchitecture else ""
    print(f"# {here.cpu_model}{uarch}, {here.usable_cores} usable cores, platform {here.id}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    for n in order:
        print(f"#   {n}: {describe_base(bases[n])}{'  <- nearest this machine' if n == nearest else ''}")
    out: dict = {"platform": here.id, "nearest": nearest, "models": {}}
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.db:
        from rooftune.perfmodel import load_profile_data, regression_metrics
        from rooftune.perfmodel.evaluate import by_primitive, by_primitive_line, predict_for
        from rooftune.store import Store

        with Store(args.db, create=False) as s:
            data = load_profile_data(s, here.id)
        # scored on the layers of these networks that no other network in the store has: in the
        # store a base was trained from, the layers it never saw
        own = [i for i, src in enumerate(data.sources) if src and set(src) <= set(models)]
        if own:
            print(f"per layer: the {len(own)} of {len(data)} profiled specs that only {', '.join(sorted(models))} use")
            data = data.subset(own)
        out["per_layer"] = {}
        for n in order:
            m = bases[n]
            pred = predict_for(m, data)
            r = {**regression_metrics(pred, data.times), "by_primitive": by_primitive(pred, data.times, data.primitives)}
            out["per_layer"][n] = r
            seen = " (trained on these rows)" if not own and here.id in (m.provenance_.get("platforms") or []) else ""
            print(f"per layer, {len(data)} profiled specs{seen}: {n} top-1 {r['top1']:.1%}, regret mean "
                  f"{r['regret_mean']:.1%} worst {r['regret_worst']:.1%}, Spearman {r['spearman']:.3f}, "
                  f"within +-10 % {r['within_10pct']:.1%}")
            print(f"  {by_primitive_line(r['by_primitive'])}")
    policy = comparison_policy(args.budget)
    for name in models:
        wl = load_workload(name, batch=1, check=False)
        inputs = list(wl.inputs)
        cands = {}
        for n in order:
            # what `rooftune select` does with that model: layout-aware, rewritten, verified,
            # and a primitive on a thread pool of its own (NNPACK, ONNX Runtime's MLAS) or
            # a fast algorithm (Winograd, FFT) kept only if the network ran faster with it,
            # measured (select's own comparisons come with it)
            c = select(name, perfmodel=bases[n], db=args.db, measure_s=args.budget, promote=False)
            cands[n] = c
            hist = dict(Counter(ch.primitive for ch in c.selection.choices).most_common())
            pools = [x.describe() for x in c.checks]
            print(f"{name}: {n} chose {hist}; "
                  f"verified {c.verification.ok}, fallbacks {len(c.verification.fallbacks)}"
                  + "".join(f"\n    {x}" for x in pools))

        def runner(m):
            return module_runner(m, inputs)

        a, b = cands[order[1]], cands[order[0]]
        cmp = compare(runner(a.module), runner(b.module), label_a=order[1], label_b=order[0], policy=policy,
                      platform_id=here.id)
        rec = {"layers": cands[order[0]].layers, "nearest_over_other": cmp.ratio, "ci": list(cmp.ci),
               "other_s": cmp.a.median, "nearest_s": cmp.b.median, "vs_vanilla": {}}
        for n in order:
            v = compare(runner(wl.module), runner(cands[n].module), label_a="vanilla", label_b=n, policy=policy,
                        platform_id=here.id)
            rec["vs_vanilla"][n] = {"speedup": v.ratio, "ci": list(v.ci)}
        out["models"][name] = rec
        line = (f"{name} ({rec['layers']} convolutions): {order[0]} selection {cmp.ratio:.3f}x "
                f"(CI {cmp.ci[0]:.3f}-{cmp.ci[1]:.3f}) the speed of {order[1]}'s; "
                f"{cmp.b.median * 1e3:.2f} vs {cmp.a.median * 1e3:.2f} ms; over vanilla "
                + ", ".join(f"{n} {r['speedup']:.3f}x (CI {r['ci'][0]:.3f}-{r['ci'][1]:.3f})"
                            for n, r in rec["vs_vanilla"].items()))
        print(line, flush=True)
    ratios = [r["nearest_over_other"] for r in out["models"].values()]
    if ratios:
        out["geomean"] = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeomean: the nearest base's selection {out['geomean']:.3f}x the speed of the other's")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
