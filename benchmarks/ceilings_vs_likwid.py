"""rooftune's bandwidth probe and FMA peak against likwid-bench, level by level, interleaved.

    .venv/bin/python benchmarks/ceilings_vs_likwid.py [--pairs 3] [--quick] [--levels fp32,L1,L2,L3,DRAM]

Target (issue 64): rooftune / likwid within 0.9-1.1 at every level.

Rows: fp32 (FMA peak: rooftune's vector FMA chains against likwid's ``peakflops_sp_<isa>``) and
the triad bandwidth of L1, L2, L3 and DRAM (rooftune's triad probe, one point of its sweep, against
likwid's ``stream_sp_<isa>``, the STREAM triad a = b + s * c in single precision, which is what
rooftune's triad computes). Both tools run on all usable cores.

Working sets, from the caches the cores see: half of L1, half of L2, half of L3 (the L3 capacity of
a `rooftune machine` run, which is what its plateau reached where a socket-wide L3 holds far less
for these cores than sysfs says), and DRAM at :data:`DRAM_FACTOR` times that L3. A working set is
every array of every thread together, on both sides (likwid's ``-w S0:<size>:<threads>``).

Interleaving: for each level the two tools alternate in A B B A order (rooftune, likwid, likwid,
rooftune), ``--pairs`` times, so that drift of this shared machine within a level hits both sides
alike. The i-th run of each side forms pair i.

Statistic: the median of the runs, on both sides. One run is each tool's own figure for one working
set: likwid's is its one timed run (averaged over its iterations, >= 1 s); rooftune's is the point
as its sweep records it (the fastest sample of one measurement of 5 ms calls); the median sample
of that measurement is printed beside it. The ratio is median / median; its spread is the min-max
of the per-pair ratios.

Bytes: likwid counts its stream triad as 12 B per single-precision element (8 loaded, 4 stored) with
no write-allocate traffic (``likwid-bench -l``); rooftune's triad counts 3 arrays x 4 B = 12 B per
element, no write-allocate either (``kernels.STREAM_ARRAYS``). The script reads both counts and
scales rooftune's figure to likwid's count (a factor of 1 while they agree). FLOPs: both count an
FMA as 2.

Last, the figures a `rooftune machine` run reported (its triad per level and its ceiling, the best
kernel) are printed beside likwid's medians: that run is not interleaved with likwid; it is the
run the L3 capacity came from.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rooftune.machine import get_ceilings, probes
from rooftune.machine.ceilings import SWEEP_ARRAYS_FACTOR, SWEEP_MEMORY_SHARE, available_memory
from rooftune.machine.kernels import STREAM_ARRAYS
from rooftune.platform import current_platform

#: rooftune / likwid must lie in this band at every level.
TARGET = (0.9, 1.1)
#: DRAM's working set in multiples of the L3 the cores see: twice the 4x past which rooftune's
#: sweep confirms DRAM's plateau, so that both tools measure well inside it.
DRAM_FACTOR = 8
#: L1, L2 and L3 are measured at this share of their capacity: inside the level's plateau, away
#: from the transition to the next level (conflict misses, a shared L3's other tenants).
CACHE_SHARE = 0.5
#: The FMA peak's likwid working set per thread: a few KiB, so the kernel runs from L1.
PEAK_BYTES_PER_THREAD = 12 * 1000
#: rooftune's single-precision element.
FLOAT_BYTES = 4
LEVELS = ("fp32", "L1", "L2", "L3", "DRAM")


@dataclass(frozen=True)
class Row:
    """One level's runs: rates (FLOP/s or B/s, in likwid's byte count) in the order taken."""

    level: str
    size: int
    rooftune: tuple[float, ...]
    rooftune_median_sample: tuple[float, ...]
    likwid: tuple[float, ...]


def isa_suffix(isa: set[str]) -> str:
    """likwid's kernel variant for this ISA."""
    if "avx512f" in isa:
        return "avx512_fma"
    if "fma" in isa:
        return "avx_fma"
    return "sse"


def likwid_bytes_per_element(test: str) -> int:
    """Bytes likwid counts per element of ``test`` (load + store, no write-allocate)."""
    out = subprocess.run(["likwid-bench", "-l", test], capture_output=True, text=True, check=True).stdout
    load = re.search(r"Load bytes per element:\s+(\d+)", out)
    store = re.search(r"Store bytes per element:\s+(\d+)", out)
    if not load or not store:
        raise RuntimeError(f"likwid-bench -l {test}: no load/store bytes per element in its output")
    return int(load.group(1)) + int(store.group(1))


def likwid(test: str, size: int, threads: int) -> tuple[float, int]:
    """One likwid-bench run: (MFlops/s or MByte/s as FLOP/s or B/s, the bytes it used).
    likwid's kB is 1000 bytes."""
    out = subprocess.run(["likwid-bench", "-t", test, "-w", f"S0:{max(1, round(size / 1000))}kB:{threads}"],
                         capture_output=True, text=True, check=True).stdout
    key = "MFlops/s" if test.startswith("peakflops") else "MByte/s"
    rate = re.search(rf"{re.escape(key)}:\s+([\d.]+)", out)
    used = re.search(r"Size \(Byte\):\s+(\d+)", out)
    if not rate or not used:
        raise RuntimeError(f"likwid-bench {test}: no {key} or size in its output")
    return float(rate.group(1)) * 1e6, int(used.group(1))


def likwid_rate(test: str, size: int, threads: int) -> float:
    return likwid(test, size, threads)[0]


def rooftune_triad(cpus: tuple[int, ...], vector_bytes: int, size: int, scale: float) -> tuple[float, float]:
    """One point of rooftune's sweep, times ``scale`` (to likwid's byte count): (fastest-sample
    rate, median-sample rate)."""
    effort = replace(probes.FULL, sweep_kernels=("triad",), sweep_passes=1, late_dram_pass=False)
    [point] = probes.bandwidth_sweep(cpus, vector_bytes, [size], effort)["triad"]
    work = point.measurement.params["bytes_per_call"]
    return point.bandwidth * scale, point.measurement.rate(work) * scale


def rooftune_peak(cpus: tuple[int, ...], vector_bytes: int) -> tuple[float, float]:
    """rooftune's fp32 FMA peak on all of ``cpus``: (fastest-sample rate, median-sample rate)."""
    r = probes.fma_peak("float32", cpus, [len(cpus)], vector_bytes, probes.FULL)
    # the measurement on every thread that gave the peak (a retry may have followed it)
    m = max((m for m in r.measurements if m.params["threads"] == len(cpus)),
            key=lambda m: m.rate(m.params["flops_per_call"], best=True))
    return r.flops[len(cpus)], m.rate(m.params["flops_per_call"])


def interleave(level: str, size: int, pairs: int, run_a: Callable[[], tuple[float, float]],
               run_b: Callable[[], float]) -> Row:
    """``pairs`` runs a side in A B B A order: rooftune (``run_a``: fastest and median sample),
    likwid (``run_b``), likwid, rooftune, ..."""
    a: list[tuple[float, float]] = []
    b: list[float] = []
    for i in range(pairs):
        if i % 2 == 0:
            a.append(run_a())
            b.append(run_b())
        else:
            b.append(run_b())
            a.append(run_a())
        print(f"  {level} run {i + 1}/{pairs}: rooftune {a[-1][0] / 1e9:.1f} G, likwid {b[-1] / 1e9:.1f} G",
              file=sys.stderr)
    return Row(level, size, tuple(x for x, _ in a), tuple(y for _, y in a), tuple(b))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=6, help="runs a side at each level (A B B A order)")
    ap.add_argument("--quick", action="store_true",
                    help="2 runs a side and a --quick `rooftune machine` (a smoke run)")
    ap.add_argument("--levels", default=",".join(LEVELS), help=f"rows to measure, of {','.join(LEVELS)}")
    args = ap.parse_args()
    pairs = 2 if args.quick else args.pairs
    levels = [lv for lv in args.levels.split(",") if lv]
    if unknown := set(levels) - set(LEVELS):
        ap.error(f"--levels: unknown {sorted(unknown)}; allowed {', '.join(LEVELS)}")
    if not shutil.which("likwid-bench"):
        print("likwid-bench not found: apt-get install likwid", file=sys.stderr)
        return 2

    platform = current_platform()
    cpus = platform.usable_cpus()
    threads = len(cpus)
    suffix = isa_suffix(set(platform.effective_isa))
    stream, peak = f"stream_sp_{suffix}", f"peakflops_sp_{suffix}"
    likwid_count = likwid_bytes_per_element(stream)
    rooftune_count = STREAM_ARRAYS["triad"] * FLOAT_BYTES
    to_likwid = likwid_count / rooftune_count

    db = str(Path(tempfile.mkdtemp()) / "bench.db")
    t0 = time.perf_counter()
    reported = get_ceilings(quick=args.quick, refresh=True, db=db, threads=[threads])
    wall = time.perf_counter() - t0
    caps = reported.capacity_bytes
    sizes = {"fp32": PEAK_BYTES_PER_THREAD * threads}
    sizes.update({lv: int(CACHE_SHARE * caps[lv]) for lv in ("L1", "L2", "L3") if lv in caps})
    last = "L3" if "L3" in caps else "L2" if "L2" in caps else None
    if last is not None:
        dram = DRAM_FACTOR * caps[last]
        memory = available_memory()
        if memory:
            dram = min(dram, int(SWEEP_MEMORY_SHARE * memory / SWEEP_ARRAYS_FACTOR))
        sizes["DRAM"] = dram

    rows: list[Row] = []
    for level in levels:
        if level not in sizes:
            print(f"{level}: no capacity for it on this machine; skipped", file=sys.stderr)
            continue
        size = sizes[level]
        if level == "fp32":
            run_a = functools.partial(rooftune_peak, cpus, platform.vector_bytes)
            run_b = functools.partial(likwid_rate, peak, size, threads)
        else:
            run_a = functools.partial(rooftune_triad, cpus, platform.vector_bytes, size, to_likwid)
            run_b = functools.partial(likwid_rate, stream, size, threads)
        row = interleave(level, size, pairs, run_a, run_b)
        rows.append(row)

    fp = os.popen("uname -srm").read().strip()
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"machine: {platform.cpu_model} ({platform.microarchitecture}), {threads} usable cores, "
          f"platform {platform.id}, {fp}")
    print(f"kernels: likwid-bench {peak} / {stream} (STREAM triad a = b + s*c, fp32); "
          "rooftune fp32 FMA / triad")
    print(f"bytes counted: likwid {likwid_count} B per element, rooftune {rooftune_count} B per element "
          f"(neither counts write-allocate); rooftune's rates x {to_likwid:.3f}")
    print(f"order: A B B A per level, {pairs} runs a side; statistic: median of the runs on both sides; "
          "spread: min-max of the per-pair ratios")
    print(f"{'level':6} {'working set':>12} {'rooftune':>11} {'(median smp)':>12} {'likwid':>11} {'ratio':>6}"
          f"  {'pair ratios':>11}  within {TARGET[0]}-{TARGET[1]}")
    ok = True
    medians: dict[str, float] = {}
    for row in rows:
        unit = "F" if row.level == "fp32" else "B"
        a, b = statistics.median(row.rooftune), statistics.median(row.likwid)
        medians[row.level] = b
        ratios = [x / y for x, y in zip(row.rooftune, row.likwid, strict=True)]
        ratio = a / b
        within = TARGET[0] <= ratio <= TARGET[1]
        ok &= within
        median_sample = statistics.median(row.rooftune_median_sample)
        print(f"{row.level:6} {row.size / 1024**2:9.2f} MiB {a / 1e9:9.1f} G{unit} "
              f"{median_sample / 1e9:10.1f} G {b / 1e9:9.1f} G{unit} {ratio:6.3f}  "
              f"{min(ratios):.2f}-{max(ratios):.2f}  {'yes' if within else 'NO'}")
    print(f"`rooftune machine{' --quick' if args.quick else ''}` before the comparison ({wall:.1f} s; "
          f"L3 capacity used {caps.get('L3', 0) / 1024**2:.0f} MiB), not interleaved:")
    triad = reported.bandwidth_by_kernel.get("triad", {})
    for level in ("L1", "L2", "L3", "DRAM"):
        if level in medians and level in reported.bandwidth:
            t, c = triad.get(level, float("nan")) * to_likwid, reported.bandwidth[level]
            print(f"  {level:5} triad {t / 1e9:7.1f} GB/s ({t / medians[level]:.3f} of likwid's median), "
                  f"ceiling (best kernel) {c / 1e9:7.1f} GB/s ({c / medians[level]:.3f})")
    if "fp32" in medians:
        f = reported.peak_flops["fp32"]
        print(f"  fp32  peak {f / 1e9:7.1f} GFLOP/s ({f / medians['fp32']:.3f} of likwid's median)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
