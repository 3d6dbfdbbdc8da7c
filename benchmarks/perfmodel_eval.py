"""Performance model, classifiers, transfer and selection, measured on profiled data.

    .venv/bin/python benchmarks/perfmodel_eval.py --db PROFILES.db [--target PLATFORM] [--select resnet50] [--json OUT]
        [--estimator mlp] [--target-kind auto|time|per_flop|roofline] [--probe-exponent X] [--regressors mlp/roofline]

Needs a store with a campaign over several networks on this machine, e.g.
    rooftune profile --models resnet18,resnet50,mobilenet_v2,vgg16,googlenet,squeezenet1_0,shufflenet_v2_x1_0,\\
        mnasnet1_0,efficientnet_b0,densenet121,alexnet,regnet_x_400mf,inception_v3 --sample 150 --db PROFILES.db
and, for transfer, a second platform in the same store (an ISA-capped variant:
    rooftune profile --isa-variant avx --models resnet18,resnet50,mobilenet_v2,squeezenet1_0,googlenet --sample 100 --db PROFILES.db).

Targets (issue "Learned performance model, transfer learning, conv-method classifiers and per-layer selection"):
  * held-out networks: >= 90 % of predictions within +-10 %, Spearman >= 0.9, top-1 >= 85 %, mean regret <= 3 %;
    selecting all layers of resnet50 in <= 1 s;
  * the classifiers beat both baselines in mean regret;
  * transfer with k = 50: within +-10 % on the target >= 80 %, and >= 15 points above from-scratch on the same 50;
  * the selected network within 3 % of the oracle selection's end-to-end time, and faster than vanilla PyTorch.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--platform", default=None, help="source platform (default: this machine)")
    ap.add_argument("--target", default=None, help="transfer target platform (default: the other one in the store)")
    ap.add_argument("--select", default="resnet50", help="network to select, rewrite and measure ('' to skip)")
    ap.add_argument("--estimator", default="mlp",
                    help="regressor used for selection and as transfer base (default: mlp, the kind `rooftune select` ships)")
    ap.add_argument("--target-kind", default="auto", choices=("auto", "time", "per_flop", "roofline"),
                    help="what that regressor learns (PerfModel's target; roofline: mlp only)")
    ap.add_argument("--probe-exponent", type=float, default=None,
                    help="bring the profiled times to the quiet machine with this exponent of the probe's reading "
                         "(default: the library's, PROBE_ELASTICITY; 0: the times as stored)")
    ap.add_argument("--regressors", default=None,
                    help="the regressors held out in turn, comma-separated (default: gbr,rf,mlp,mlp/roofline; "
                         "mlp/roofline alone is the one `rooftune train` fits)")
    ap.add_argument("--curve", default=None, help="write the transfer learning curve here (PNG)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from rooftune.errors import InvalidArgument
    from rooftune.perfmodel import PerfModel, evaluate, learning_curve, load_profile_data
    from rooftune.perfmodel.evaluate import REGRESSORS, by_primitive_line
    from rooftune.platform import current_platform
    from rooftune.selection.timing import select_time
    from rooftune.store import Store

    regressors = tuple(r for r in (args.regressors or ",".join(REGRESSORS)).split(",") if r)
    unknown = [r for r in regressors if r not in REGRESSORS]
    if unknown or not regressors:
        raise SystemExit(str(InvalidArgument("--regressors", args.regressors, f"allowed a list of {', '.join(REGRESSORS)}")))
    here = current_platform()
    out: dict = {"platform": here.id, "cpu": here.cpu_model, "usable_cores": here.usable_cores}
    with Store(args.db) as s:
        data = load_profile_data(s, args.platform, probe_exponent=args.probe_exponent)
        others = [p for p in s.fingerprints() if p != data.platform_id and s.profiles(p)]
        target = (load_profile_data(s, args.target or (others[0] if others else None), probe_exponent=args.probe_exponent)
                  if (args.target or others) else None)
    print(f"# {here.cpu_model}, {here.usable_cores} usable cores; source platform {data.platform_id}: {len(data)} specs, "
          f"{len(data.networks)} networks; {data.threads} threads")
    t0 = time.perf_counter()
    ev = evaluate(data, estimators=regressors, progress=lambda m: print(f"  {m}", flush=True))
    out["evaluation"] = ev
    print(f"\n## held-out networks (leave one out; {time.perf_counter() - t0:.0f} s)")
    for name, m in ev["regressors"].items():
        print(f"{name:4s} within10 {m['within_10pct']:.1%}  MAPE {m['mape']:.1%}  RMSPE {m['rmspe']:.1%}  "
              f"Spearman {m['spearman']:.3f}  top-1 {m['top1']:.1%} (within 5 %: {m['top1_within_5pct']:.1%})  "
              f"regret mean {m['regret_mean']:.1%} worst {m['regret_worst']:.1%}")
    for name, m in ev["regressors"].items():
        print(f"{name} {by_primitive_line(m.get('by_primitive', {}))}")
    ps = ev.get("probe_scaling") or {}
    print(f"times brought to the quiet machine (probe exponent {ps.get('exponent')}): {ps.get('scaled')} of "
          f"{ps.get('rows')} rows scaled, median factor {ps.get('median', 1):.3f}, 90th percentile {ps.get('p90', 1):.3f}")
    rep = ev.get("repeatability") or {}
    if rep.get("rows"):
        print(f"the held-out rows against themselves: {rep['within_10pct']:.1%} of {rep['rows']} had a second pass within "
              f"10 % of their stored time ({rep['within_5pct']:.1%} within 5 %)")
        if rep.get("fastest_specs"):
            print(f"their second-fastest passes name the same fastest primitive on {rep['same_fastest']:.1%} of "
                  f"{rep['fastest_specs']} specs")
        for name, m in ev["regressors"].items():
            if m.get("steady_pairs"):
                print(f"{name:4s} within10 on those steady rows only: {m['within_10pct_steady']:.1%} of {m['steady_pairs']}")
    for group in ("classifiers", "baselines"):
        for name, m in ev[group].items():
            print(f"{name:18s} accuracy {m['accuracy']:.1%}  regret mean {m['regret_mean']:.1%}  worst {m['regret_worst']:.1%}")
    model = data.fit(PerfModel(args.estimator, target=args.target_kind))
    print(f"selection and transfer base: {args.estimator}, target {model.target_}")
    st = select_time(model)
    out["select_time"] = st
    print(f"selecting {st['layers']} convolutions of {st['model']}: {st['seconds'] * 1e3:.0f} ms")

    if target is not None:
        print(f"\n## transfer {data.platform_id} -> {target.platform_id} ({len(target)} specs)")
        curves = {}
        # fine-tuning needs an mlp base: with another estimator, one mlp is fitted for it
        mlp = model if args.estimator == "mlp" else data.fit(PerfModel("mlp", target=args.target_kind))
        for sampler in ("cluster", "random"):
            c = learning_curve(model, target, sampler=sampler, methods=("base", "residual", "scratch"), repeats=3)
            c["curve"]["finetune"] = learning_curve(mlp, target, sampler=sampler, methods=("finetune",),
                                                    repeats=3)["curve"].get("finetune", {})
            curves[sampler] = c
            for m, by_k in c["curve"].items():
                print(f"{sampler:6s} {m:9s} " + "  ".join(f"k={k}: {v['within_10pct']:.1%}" for k, v in sorted(by_k.items())))
        out["transfer"] = curves
        if args.curve:
            from rooftune.perfmodel.transfer import plot_learning_curve

            plot_learning_curve(curves["cluster"], args.curve)

    if args.select:
        from rooftune.selection import select

        print(f"\n## selection on {args.select}")
        r = select(args.select, perfmodel=model, db=args.db, threads=data.threads, measure_s=10.0,
                   promote=False)  # the model's own choice, against the oracle (the target)
        out["selection"] = r.to_dict()
        print(f"selected in {r.select_time_s * 1e3:.0f} ms; verification ok={r.verification.ok} "
              f"(max error {r.verification.max_rel:.1e}), fallbacks {len(r.verification.fallbacks)}")
        for label, c in r.comparisons.items():
            print(f"selected vs {label}: {c['speedup']:.3f}x (CI {c['ci'][0]:.3f}-{c['ci'][1]:.3f}); "
                  f"{c['selected_s'] * 1e3:.2f} ms vs {c['other_s'] * 1e3:.2f} ms")
        for n in r.notes:
            print(f"note: {n}")

    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
