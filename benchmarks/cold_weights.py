"""Warm rows against a layer inside a network: each primitive timed with its weights in the caches,
as a profiling campaign times every row, and with the caches evicted before every call.

    .venv/bin/python benchmarks/cold_weights.py [--models wide_resnet50_2] [--kernels 3]
        [--primitives winograd-f4x4,winograd-f2x2,fft,onnxruntime-mlas,nnpack] [--budget 3] [--json OUT]

For every distinct convolution of the models (only those with the given kernel sizes), each
primitive is compared with pre-packed oneDNN (NHWC), interleaved by the harness, twice: warm (the
same call over and over) and cold (before every timed call of either side, untimed, a buffer
larger than all the caches is written, then the layer's input is read again, as the previous
layer of a network has just written it; the weights, packed or transformed, come from memory).
The line gives both ratios (oneDNN's time over the primitive's: below 1, oneDNN is faster) with
their 95 % intervals, and cold over warm: below 1, the warm row flatters the primitive against
oneDNN inside a network. Every primitive's output is checked against F.conv2d first.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="wide_resnet50_2")
    ap.add_argument("--kernels", default="3", help="kernel sizes of the layers kept, e.g. 1,3")
    ap.add_argument("--primitives", default="winograd-f4x4,winograd-f2x2,fft,onnxruntime-mlas,nnpack")
    ap.add_argument("--reference", default="onednn-prepacked-nhwc")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per interleaved comparison")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import numpy as np
    import torch
    import torch.nn.functional as F

    from rooftune.bench import compare
    from rooftune.bench.measurement import Policy
    from rooftune.platform import current_platform
    from rooftune.primitives import get_primitive
    from rooftune.primitives.base import to_layout
    from rooftune.runtimes.winograd_onnx import evict_size
    from rooftune.selection.graph import conv_graph
    from rooftune.workload import load_workload

    here = current_platform()
    torch.set_num_threads(here.usable_cores)
    kernels = {int(k) for k in args.kernels.split(",")}
    specs = {}
    for name in args.models.split(","):
        wl = load_workload(name.strip(), batch=1, check=False)
        for s in conv_graph(wl.module, list(wl.inputs)).specs:
            if s.R in kernels and s.S in kernels:
                specs.setdefault(s.key(), s)
    sweep = np.zeros(evict_size() // 8)
    ref = get_primitive(args.reference)
    prims = [get_primitive(p) for p in args.primitives.split(",")]
    print(f"# {here.cpu_model} ({here.microarchitecture}), {here.usable_cores} threads, platform {here.id}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}; {len(specs)} layers of {args.models}; eviction {sweep.nbytes >> 20} MiB")
    print(f"# {args.reference} time / primitive's time: warm, cold (caches evicted, input read again), cold / warm")
    out = []
    policy = Policy(number=1, budget_s=args.budget, warmup_s=0.2)
    gen = torch.Generator().manual_seed(0)
    for s in specs.values():
        w = torch.randn(s.K, s.C // s.groups, s.R, s.S, generator=gen)
        x = torch.randn(s.N, s.C, s.H, s.W, generator=gen)
        expect = F.conv2d(x, w, None, s.stride, s.padding, s.dilation, s.groups)
        k_ref, x_ref = ref.prepare(s, w, None), to_layout(x, ref.in_layout)
        for p in prims:
            if p.supports(s) is not True:
                continue
            k, xp = p.prepare(s, w, None), to_layout(x, p.in_layout)
            with torch.no_grad():
                err = float((k.run(xp) - expect).abs().max() / expect.abs().max())
                if err > 1e-3:
                    print(f"{s.describe():40s} {p.name:16s} output differs from F.conv2d by {err:.1e}: skipped")
                    continue

                def evict(xs=(x_ref, xp)) -> None:
                    sweep[::8] += 1.0
                    for t in xs:
                        t.sum()

                def run_ref(k=k_ref, x=x_ref):
                    return k.run(x)

                def run_p(k=k, x=xp):
                    return k.run(x)

                warm = compare(run_ref, run_p, label_a=args.reference, label_b=p.name, policy=policy)
                cold = compare(run_ref, run_p, label_a=args.reference, label_b=p.name, policy=policy, before=evict)
            r = {"spec": s.to_dict(), "primitive": p.name, "warm": warm.ratio, "warm_ci": list(warm.ci),
                 "cold": cold.ratio, "cold_ci": list(cold.ci), "warm_s": warm.b.median, "cold_s": cold.b.median,
                 "reference_warm_s": warm.a.median, "reference_cold_s": cold.a.median}
            out.append(r)
            print(f"{s.describe():40s} {p.name:16s} warm {warm.ratio:.3f} ({warm.ci[0]:.3f}-{warm.ci[1]:.3f})  "
                  f"cold {cold.ratio:.3f} ({cold.ci[0]:.3f}-{cold.ci[1]:.3f})  cold/warm {cold.ratio / warm.ratio:.3f}",
                  flush=True)
    by: dict[str, list[float]] = {}
    for r in out:
        by.setdefault(r["primitive"], []).append(r["cold"] / r["warm"])
    for name, v in by.items():
        print(f"{name:16s} cold/warm over {len(v)} layers: geomean {float(np.exp(np.mean(np.log(v)))):.3f}, "
              f"range {min(v):.3f}-{max(v):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"platform": here.id, "models": args.models, "rows": out}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
