"""Where the spread of repeated profiling measurements comes from: time or allocation.

    .venv/bin/python benchmarks/profile_spread.py [THREADS] [--repeats 8]

Three convolutions of resnet50 / mobilenet_v2 (batch 1) and three primitives each are measured
REPEATS times back to back with the campaign's policy, alternating "same" (one prepared kernel and
input, measured again) and "fresh" (the primitive prepared again on copied weights and a copied
input: new allocations, new packing). Per row: the median of the medians, the spread (slowest /
fastest median) and how many measurements land within 5 % of the fastest. If "fresh" spreads more
than "same", where memory lands matters; if both spread alike, the host's load over time does.
"""

from __future__ import annotations

import argparse
import statistics as st


def main() -> None:
    import torch

    from rooftune.bench import measure
    from rooftune.platform import current_platform
    from rooftune.primitives import ConvSpec, all_primitives, to_layout
    from rooftune.primitives.check import example
    from rooftune.profiling.campaign import PROFILE_POLICY

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("threads", type=int, nargs="?", default=2)
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    platform = current_platform()
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}; {args.threads} thread(s)")
    specs = [("256x14 3x3", ConvSpec(1, 256, 14, 14, 256, 3, 3, (1, 1), (1, 1), (1, 1), 1, "fp32")),
             ("64x56 1x1", ConvSpec(1, 64, 56, 56, 64, 1, 1, (1, 1), (0, 0), (1, 1), 1, "fp32")),
             ("32x112 3x3 dw", ConvSpec(1, 32, 112, 112, 32, 3, 3, (1, 1), (1, 1), (1, 1), 32, "fp32"))]
    prims = {p.name: p for p in all_primitives()}
    n = args.repeats
    for label, spec in specs:
        for name in ("onednn-prepacked-nhwc", "pytorch-default", "im2col-gemm"):
            p = prims[name]
            if p.supports(spec) is not True:
                continue
            x, w, b = example(spec)
            kernel, xin = p.prepare(spec, w, b), to_layout(x, p.in_layout)
            same: list[float] = []
            fresh: list[float] = []
            for _ in range(n):
                same.append(measure(lambda k=kernel, xi=xin: k.run(xi), label="same", policy=PROFILE_POLICY).median)
                k2, x2 = p.prepare(spec, w.clone(), b.clone()), to_layout(x.clone(), p.in_layout)
                fresh.append(measure(lambda k2=k2, x2=x2: k2.run(x2), label="fresh", policy=PROFILE_POLICY).median)

            def row(v: list[float]) -> str:
                close = sum(t <= 1.05 * min(v) for t in v)
                return f"{st.median(v) * 1e3:.3f} ms spread {max(v) / min(v):.2f} {close}/{n}"

            print(f"{label:17s} {name:22s} same {row(same)} | fresh {row(fresh)}", flush=True)


if __name__ == "__main__":
    main()
