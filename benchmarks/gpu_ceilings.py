"""The roofline of a CUDA device (`rooftune machine --device cuda`) against what else measures or
states the same ceilings, in one run:

- the time a run takes, quick and full, and how far two full runs agree;
- the device-memory ceiling against torch's own kernels over 2 GiB (``Tensor.copy_``, a device to
  device copy counting bytes read and written, and ``Tensor.sum``, reading), timed by the same
  harness with the same clock;
- the vector FMA peaks against the rate the chip's lanes give at its maximum SM clock and at the
  SM clock nvidia-smi saw while the run went on (multiprocessors x lanes per multiprocessor x 2 x
  clock; lanes from the compute capability's documented count, where known).

    python benchmarks/gpu_ceilings.py [--device cuda:0] [--db FILE] [--json OUT] [--plots DIR]

Needs a CUDA device and Triton; measures in a fresh store (default: a temporary file).

Target: none stated (BENCHMARKS.md, "The roofline of a CUDA device"): the figures stand beside
torch's own kernels and the chip's lanes at their clock.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from typing import Any

#: FP32 and FP64 lanes per multiprocessor by compute capability (CUDA C++ Programming Guide,
#: "Arithmetic Instructions" throughput table: results per clock cycle per multiprocessor).
LANES = {(7, 0): (64, 32), (8, 0): (64, 32), (8, 6): (128, 2), (8, 9): (128, 2), (9, 0): (128, 64)}


def peer_bandwidth(index: int, clock: Any) -> dict[str, float]:
    import torch

    from rooftune.bench import Policy, measure

    dev = f"cuda:{index}"
    n = 2 * 1024**3 // 4 // 2  # two arrays of 1 GiB: 2 GiB moved per copy
    x = torch.rand(n, device=dev)
    y = torch.empty_like(x)
    policy = Policy(min_sample_time_s=0.02, warmup_s=0.1, budget_s=1.0, min_samples=8)
    copy = measure(lambda: y.copy_(x), label="peer.copy_", policy=policy, clock=clock)
    z = torch.rand(2 * n, device=dev)  # 2 GiB read
    read = measure(lambda: z.sum(), label="peer.sum", policy=policy, clock=clock)
    return {"torch_copy": 2 * n * 4 / copy.min, "torch_sum": 2 * n * 4 / read.min}


class ClockLog:
    """nvidia-smi sampling the SM clock and the power every 100 ms while a run goes on."""

    def __init__(self, card: str) -> None:
        import subprocess

        self.proc = subprocess.Popen(["nvidia-smi", f"--id={card}", "--query-gpu=clocks.sm,power.draw",
                                      "--format=csv,noheader,nounits", "-lms", "100"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def stop(self) -> dict[str, Any]:
        import statistics

        self.proc.terminate()
        text, _ = self.proc.communicate(timeout=10)
        rows = []
        for line in text.splitlines():
            try:
                clock, power = (float(v) for v in line.split(","))
            except ValueError:
                continue
            rows.append((clock, power))
        busy = [r for r in rows if r[1] > 200]  # samples while the device worked (idle draws ~80 W)
        if not busy:
            return {"samples": len(rows)}
        clocks = sorted(c for c, _ in busy)
        return {"samples": len(rows), "busy_samples": len(busy), "sm_clock_median_mhz": statistics.median(clocks),
                "sm_clock_min_mhz": clocks[0], "sm_clock_max_mhz": clocks[-1],
                "power_max_w": max(p for _, p in busy)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--db", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--plots", default=None, help="folder for the roofline and sweep figures")
    args = ap.parse_args()

    from rooftune.machine.gpu import cuda_clock, get_gpu_ceilings
    from rooftune.platform.gpu import current_gpu, parse_device, smi_id
    from rooftune.store import Store

    _, index = parse_device(args.device)
    index = index or 0
    db = args.db or os.path.join(tempfile.mkdtemp(), "gpu.db")
    device = current_gpu(index)
    print(f"{device.describe()}, {device.memory_bytes / 1024**3:.1f} GiB, L2 {device.l2_bytes / 1024**2:.1f} MiB, "
          f"clocks {device.max_clocks_mhz}, {device.library_versions}", flush=True)
    runs: dict[str, Any] = {}
    with Store(db) as store:
        for name, quick in (("quick", True), ("full_1", False), ("full_2", False)):
            log = ClockLog(smi_id(device.uuid, index))
            t0 = time.perf_counter()
            c = get_gpu_ceilings(index, quick=quick, refresh=True, store=store, device=device)
            wall = time.perf_counter() - t0
            clocks = log.stop()
            runs[name] = {"wall_s": wall, "ceilings": c.to_dict(), "clocks": clocks}
            print(f"{name}: nvidia-smi while it ran: {clocks}")
            print(f"{name}: {wall:.1f} s; peaks " + ", ".join(f"{k} {v / 1e12:.1f} T" for k, v in c.peak_flops.items())
                  + "; bandwidth " + ", ".join(f"{k} {v / 1e12:.2f} TB/s" for k, v in c.bandwidth.items())
                  + f"; dispatch {c.dispatch_overhead_s * 1e6:.2f} us, waited {c.launch_latency_s * 1e6:.2f} us",
                  flush=True)
            for k, why in c.skipped.items():
                print(f"  skipped {k}: {why}")
            for w in c.warnings:
                print(f"  warning: {w}")
    a, b = runs["full_1"]["ceilings"], runs["full_2"]["ceilings"]
    agree = {}
    for group in ("peak_flops", "bandwidth"):
        for k, v in a[group].items():
            if isinstance(v, (int, float)) and isinstance(b[group].get(k), (int, float)):
                agree[k] = abs(b[group][k] / v - 1)
    print("two full runs apart: " + ", ".join(f"{k} {d:.1%}" for k, d in agree.items()))
    peers = peer_bandwidth(index, cuda_clock(index))
    dram = max(a["bandwidth"].get("DRAM", math.nan), b["bandwidth"].get("DRAM", math.nan))
    print(f"DRAM ceiling {dram / 1e12:.2f} TB/s; torch copy_ {peers['torch_copy'] / 1e12:.2f} TB/s "
          f"(ratio {dram / peers['torch_copy']:.3f}), torch sum {peers['torch_sum'] / 1e12:.2f} TB/s "
          f"(ratio {dram / peers['torch_sum']:.3f})")
    theory: dict[str, float] = {}
    lanes = LANES.get(tuple(device.capability))
    sm_clock = device.max_clocks_mhz.get("sm")
    if lanes and sm_clock:
        for (name, lane), key in zip(zip(("fp32", "fp64"), lanes), ("fp32", "fp64"), strict=True):
            theory[name] = device.multiprocessors * lane * 2 * sm_clock * 1e6
            got = max(a["peak_flops"].get(key, math.nan), b["peak_flops"].get(key, math.nan))
            print(f"{name} FMA peak {got / 1e12:.2f} TFLOP/s; lanes x max clock {theory[name] / 1e12:.2f} "
                  f"(ratio {got / theory[name]:.3f})")
            seen = runs["full_1"]["clocks"].get("sm_clock_median_mhz")
            if seen:
                at = theory[name] * seen / sm_clock
                print(f"  at the median SM clock seen while it ran ({seen:.0f} MHz): {at / 1e12:.2f} (ratio {got / at:.3f})")
    else:
        print(f"no lane count known for {device.arch} or no SM clock read; FMA peaks not compared")
    if args.plots:
        from rooftune.machine.gpu import GpuCeilings
        from rooftune.report import plot_roofline, plot_sweep

        os.makedirs(args.plots, exist_ok=True)
        c = GpuCeilings.from_dict(a)
        plot_roofline(c, os.path.join(args.plots, "gpu_roofline.png"))
        plot_sweep(c, os.path.join(args.plots, "gpu_sweep.png"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device.to_dict(), "runs": runs, "agreement": agree, "peers": peers,
                       "theoretical": theory}, f, indent=1)


if __name__ == "__main__":
    main()
