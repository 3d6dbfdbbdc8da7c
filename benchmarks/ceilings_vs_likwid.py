"""rooftune's ceilings against likwid-bench, in one run, on all usable cores.

    .venv/bin/python benchmarks/ceilings_vs_likwid.py [--rounds 3] [--quick]

Targets (issue "Foundation and the measured machine roofline"):
  * rooftune / likwid >= 0.95 for the fp32 FMA peak and the triad bandwidth of L1, L2, L3, DRAM;
  * a full `rooftune machine` <= 30 s and `--quick` <= 8 s on a 2-core machine (wall clock of the
    command, interpreter start and imports included);
  * two full runs agree within 5 %.

Interleaving: each round runs likwid for every ceiling and then rooftune, so drift of this shared
machine hits both. Both sides are summarised the same way, by their best round (a ceiling is an
upper bound; likwid-bench prints one averaged run per call). likwid counts the stream triad as
12 bytes per single-precision element with no write-allocate traffic, as rooftune's triad does.
The working sets are half of each level's capacity for the cores used (L1, L2, L3) and 4x L3
(DRAM).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 0.95
ROOT = Path(__file__).resolve().parents[1]


def likwid(test: str, size_kb: int, threads: int) -> float:
    """MFlops/s (peakflops) or MByte/s (stream) -> FLOP/s or B/s."""
    out = subprocess.run(
        ["likwid-bench", "-t", test, "-w", f"S0:{size_kb}kB:{threads}"], capture_output=True, text=True, check=True
    ).stdout
    key = "MFlops/s" if test.startswith("peakflops") else "MByte/s"
    m = re.search(rf"{re.escape(key)}:\s+([\d.]+)", out)
    if not m:
        raise RuntimeError(f"likwid-bench {test}: no {key} in output")
    return float(m.group(1)) * 1e6


def rooftune_run(db: str, quick: bool) -> tuple[dict, float]:
    cmd = [str(ROOT / ".venv/bin/rooftune"), "machine", "--json", "--refresh", "--db", db]
    if quick:
        cmd.append("--quick")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick-rounds", type=int, default=2)
    args = ap.parse_args()
    if not shutil.which("likwid-bench"):
        print("likwid-bench not found: apt-get install likwid", file=sys.stderr)
        return 2
    db = str(Path(tempfile.mkdtemp()) / "bench.db")
    first, _ = rooftune_run(db, quick=True)  # warms the page cache and numba's imports
    plat = first["platform"]
    threads = plat["usable_cores"]
    isa = set(plat["effective_isa"])
    suffix = "avx512_fma" if "avx512f" in isa else "avx_fma"
    caps = first["bandwidth_detail"]["capacity_bytes"]
    sizes_kb = {
        "L1": caps["L1"] // 2 // 1024,
        "L2": caps["L2"] // 2 // 1024,
        "L3": caps["L3"] // 2 // 1024,
        "DRAM": 4 * caps["L3"] // 1024,
    }
    lk: dict[str, list[float]] = {k: [] for k in ["fp32", *sizes_kb]}
    rt: dict[str, list[float]] = {k: [] for k in lk}
    rt_ceiling: dict[str, list[float]] = {k: [] for k in sizes_kb}
    full_times: list[float] = []
    runs: list[dict] = []
    for r in range(args.rounds):
        lk["fp32"].append(likwid(f"peakflops_sp_{suffix}", 12 * threads, threads))
        for level, kb in sizes_kb.items():
            lk[level].append(likwid(f"stream_sp_{suffix}", kb, threads))
        data, wall = rooftune_run(db, quick=False)
        runs.append(data)
        full_times.append(wall)
        rt["fp32"].append(data["peak_flops"]["fp32"])
        triad = data["bandwidth_detail"]["by_kernel"]["triad"]
        for level in sizes_kb:
            rt[level].append(triad.get(level, float("nan")))
            rt_ceiling[level].append(data["bandwidth"].get(level, float("nan")))
        print(f"round {r + 1}: rooftune machine {wall:.1f} s", file=sys.stderr)
    quick_times = [rooftune_run(db, quick=True)[1] for _ in range(args.quick_rounds)]

    fp = os.popen("uname -srm").read().strip()
    print(f"date: {time.strftime('%Y-%m-%d')}")
    print(f"machine: {plat['cpu_model']} ({plat['microarchitecture']}), {threads} usable cores, "
          f"platform {plat['id']}, {fp}")
    print(f"kernels: likwid peakflops_sp_{suffix} / stream_sp_{suffix}; rooftune fp32 FMA / triad")
    print(f"{'ceiling':8} {'rooftune':>14} {'likwid':>14} {'ratio':>7}  target >= {TARGET_RATIO}")
    ok = True
    for k in lk:
        a, b = max(rt[k]), max(lk[k])
        unit = "FLOP/s" if k == "fp32" else "B/s"
        ratio = a / b
        ok &= ratio >= TARGET_RATIO
        spread = f"rooftune rounds {min(rt[k]) / 1e9:.0f}-{max(rt[k]) / 1e9:.0f} G, likwid {min(lk[k]) / 1e9:.0f}-{max(lk[k]) / 1e9:.0f} G"
        print(f"{k:8} {a / 1e9:10.1f} G{unit[0]} {b / 1e9:10.1f} G{unit[0]} {ratio:7.3f}  ({spread})")
    for k in sizes_kb:
        print(f"  reported {k} ceiling (best kernel): {max(rt_ceiling[k]) / 1e9:.1f} GB/s")
    print(f"full run wall time: {', '.join(f'{t:.1f}' for t in full_times)} s (target <= 30)")
    print(f"quick run wall time: {', '.join(f'{t:.1f}' for t in quick_times)} s (target <= 8)")
    keys = ["fp32", "fp64", "gemm_fp32"]
    for i in range(len(runs) - 1):
        a, b = runs[i], runs[i + 1]
        diffs = {k: abs(a["peak_flops"][k] / b["peak_flops"][k] - 1) for k in keys}
        diffs.update({lvl: abs(a["bandwidth"][lvl] / b["bandwidth"][lvl] - 1) for lvl in a["bandwidth"] if lvl in b["bandwidth"]})
        worst = max(diffs, key=lambda k: diffs[k])
        print(f"runs {i + 1} vs {i + 2}: largest difference {worst} {diffs[worst]:.1%} (target <= 5 %); "
              + ", ".join(f"{k} {v:.1%}" for k, v in diffs.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
