"""Does the machine-speed probe tell quiet stretches from slow ones?

Times five kernels of a profiling campaign (a 3x3 and a 1x1 convolution, a depthwise one, unfold,
an NCHW -> NHWC copy) in turn for SECONDS, with the campaign's policy, reading the probe
(`rooftune.bench.canary`) before and after each, and prints, per kernel, how far its
measurements lie from its fastest when the probe read quiet (within QUIET of its fastest reading)
and when it did not, and the probe's readings over time.

    .venv/bin/python benchmarks/probe_stretches.py [SECONDS] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("seconds", nargs="?", type=float, default=150.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    from rooftune.bench import measure
    from rooftune.bench.canary import QUIET, Canary
    from rooftune.platform import current_platform
    from rooftune.profiling import PROFILE_POLICY

    torch.set_num_threads(args.threads)
    platform = current_platform()
    cl = torch.channels_last
    x3, w3 = torch.randn(1, 256, 14, 14).contiguous(memory_format=cl), torch.randn(256, 256, 3, 3).contiguous(memory_format=cl)
    x1, w1 = torch.randn(1, 64, 56, 56), torch.randn(64, 64, 1, 1)
    xd, wd = torch.randn(1, 32, 112, 112).contiguous(memory_format=cl), torch.randn(32, 1, 3, 3).contiguous(memory_format=cl)
    kernels = {
        "conv 256x14 3x3 nhwc": lambda: F.conv2d(x3, w3, padding=1),
        "conv 64x56 1x1 nchw": lambda: F.conv2d(x1, w1),
        "depthwise 32x112 3x3": lambda: F.conv2d(xd, wd, padding=1, groups=32),
        "unfold 64x56 3x3": lambda: F.unfold(x1, 3, padding=1),
        "nchw->nhwc 64x56": lambda: x1.contiguous(memory_format=cl),
    }
    probe = Canary()
    rows: list[tuple[float, str, float, float]] = []
    start = time.perf_counter()
    before = probe.read()
    while time.perf_counter() - start < args.seconds:
        for name, fn in kernels.items():
            m = measure(fn, label=name, policy=PROFILE_POLICY).median
            after = probe.read()
            rows.append((time.perf_counter() - start, name, m, max(before, after)))
            before = after
    ref = min(r[3] for r in rows)
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}; "
          f"{args.threads} threads, {args.seconds:.0f} s, {len(rows)} measurements")
    quiet_share = sum(1 for r in rows if r[3] <= QUIET * ref) / len(rows)
    print(f"probe fastest {ref * 1e3:.3f} ms; measurements with the probe quiet (<= {QUIET:.2f}x): {quiet_share:.0%}")
    print(f"{'kernel':22s} {'quiet: n, median / fastest, within 5 %':>42s}   {'not quiet: n, median / fastest, within 5 %':>44s}")
    for name in kernels:
        mine = [r for r in rows if r[1] == name]
        best = min(r[2] for r in mine)
        cols = []
        for group in ([r for r in mine if r[3] <= QUIET * ref], [r for r in mine if r[3] > QUIET * ref]):
            if group:
                rel = [r[2] / best for r in group]
                cols.append(f"{len(group):4d}, {statistics.median(rel):.3f}, {sum(q <= 1.05 for q in rel) / len(rel):6.1%}")
            else:
                cols.append("   -")
        print(f"{name:22s} {cols[0]:>42s}   {cols[1]:>44s}")
    print("probe over time (s: reading / fastest), one per 5 measurements:")
    print("  " + "  ".join(f"{r[0]:.0f}:{r[3] / ref:.2f}" for r in rows[::5]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
