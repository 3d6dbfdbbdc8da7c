"""Serving scenarios: the load generator against the M/D/c queue, and `rooftune tune --scenario
server / offline` against the serving peers as their users run them.

    .venv/bin/python benchmarks/serving.py [--check] [--models resnet18,mobilenet_v2,squeezenet1_0]
                                           [--scenarios server,offline] [--db PATH] [--json OUT]

--check: the generator on servers whose call is a calibrated busy loop of a known time on a core
of its own (c processes, each pinned): with c instances, the rate at p99 <= 3 service times
against the M/D/c queue's prediction (within 10 %), and the offline rate against c / service time
(within 5 %); without dynamic batching and with it (batches of up to 4, a wait of half a service).

Targets (2 vCPUs; resnet18, mobilenet_v2, squeezenet1_0, batch 1 in the study):
  * server, p99 <= 3x the model's best single-stream latency (the single-stream study run first;
    the server study resumes its trials from the store): the rate under the SLO >= 1.2x geomean
    over the best peer as shipped, never below 1.0x;
  * offline: >= 1.1x geomean over OpenVINO's THROUGHPUT hint;
  * the whole server study within its default budget (480 s) per model.
Every ratio is the one the study reports: a server's from the two rate searches' intervals, an
offline one's from interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rooftune.bench.serving import poisson_arrivals, predicted_rate, rate_under_slo, run_load

SPIN = r"""
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
d = float(sys.argv[2])
for line in sys.stdin:
    end = time.perf_counter() + d
    while time.perf_counter() < end:
        pass
    sys.stdout.write("\n"); sys.stdout.flush()
"""


class Spinner:
    """A process on its own core whose every call is a busy loop of ``service_s``."""

    def __init__(self, cpu: int, service_s: float) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SPIN, str(cpu), str(service_s)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def __call__(self, k: int) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        self.proc.stdout.readline()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def check(service_s: float = 0.010, requests: int = 1500, cases: str | None = None) -> list[dict[str, Any]]:
    """``cases``: "C:B,..." (instances:batch) to run only those."""
    cpus = sorted(os.sched_getaffinity(0))
    rows = []
    for c in range(1, len(cpus) + 1):
        for batch, wait_s in ((1, 0.0), (4, service_s / 2)):
            if cases and f"{c}:{batch}" not in cases.split(","):
                continue
            slots = [Spinner(cpus[i], service_s) for i in range(c)]
            try:
                offline = run_load(slots, np.zeros(max(200, int(2 * c * batch / service_s))), batch=batch)
                expected_offline = c * batch / service_s
                slo = 3 * service_s
                def probe(rate: float, slots: list[Spinner] = slots, batch: int = batch, wait_s: float = wait_s) -> Any:
                    return run_load(slots, poisson_arrivals(rate, requests, 1), batch=batch, wait_s=wait_s,
                                    offered=rate)

                search = rate_under_slo(probe, slo, offline.served, steps=6, rel_tol=0.01)
                expected = predicted_rate(service_s, c, slo, batch=batch, wait_s=wait_s)
                row = {"instances": c, "batch": batch, "wait_ms": wait_s * 1e3, "service_ms": service_s * 1e3,
                       "offline": offline.served, "offline_expected": expected_offline,
                       "offline_ratio": offline.served / expected_offline, "rate": search.rate,
                       "rate_interval": [search.lo, search.hi], "rate_expected": expected,
                       "rate_ratio": search.rate / expected,
                       "generator_us_per_request": 1e6 * offline.generator_cpu_s / len(offline.latencies)}
            finally:
                for s in slots:
                    s.close()
            rows.append(row)
            print(f"c={c} batch={batch} wait={wait_s * 1e3:.1f} ms: offline {row['offline']:.1f}/s vs "
                  f"{expected_offline:.1f} ({row['offline_ratio']:.3f}); rate at p99<={slo * 1e3:.0f} ms "
                  f"{search.rate:.1f}/s [{search.lo:.1f}, {search.hi:.1f}] vs M/D/c {expected:.1f} "
                  f"({row['rate_ratio']:.3f}); generator {row['generator_us_per_request']:.0f} us CPU/request",
                  flush=True)
    return rows


def study(model: str, scenario: str, db: str, factor: float = 3.0, single_ms: float | None = None) -> dict[str, Any]:
    from rooftune.tuning import tune

    out: dict[str, Any] = {"model": model, "scenario": scenario}
    if scenario == "server":
        if single_ms is None:  # the model's best single-stream latency, from its own study
            t0 = time.perf_counter()
            single = tune(model, scenario="single-stream", store=db)
            out["single_stream_s"] = time.perf_counter() - t0
            single_ms = single.best.latency_s * 1e3
            print(f"{model}: best single-stream {single_ms:.2f} ms ({single.best.describe()})", flush=True)
        out["single_stream_ms"] = single_ms
        out["slo_ms"] = round(factor * single_ms, 2)
        print(f"{model}: SLO p99 {out['slo_ms']} ms ({factor:g}x {single_ms:.2f} ms)", flush=True)
        t0 = time.perf_counter()
        r = tune(model, scenario="server", slo_p99_ms=out["slo_ms"], store=db)
    else:
        t0 = time.perf_counter()
        r = tune(model, scenario="offline", store=db)
    out["study_s"] = time.perf_counter() - t0
    s = r.serving or {}
    out["serving"] = s
    best = s.get("best")
    peer = s.get("best_peer")
    setups = {x["name"]: x for x in s.get("setups", ())}
    # a peer that served best is the answer: 1.00x over the best peer (over itself)
    itself = {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0}
    out["vs_best_peer"] = itself if best in setups and setups[best]["peer"] else (s.get("speedup") or {}).get(peer)
    out["vs_openvino_throughput"] = (itself if best == "openvino-throughput-hint"
                                     else (s.get("speedup") or {}).get("openvino-throughput-hint"))
    rates = {x["name"]: x["rate"] for x in s.get("setups", ()) if x.get("error") is None}
    print(f"{model} {scenario}: best {best} {rates.get(best, math.nan):.1f}/s; peers "
          + ", ".join(f"{n} {v:.1f}" for n, v in rates.items() if n != best)
          + f"; vs {peer}: {out['vs_best_peer']}; study {out['study_s']:.0f} s", flush=True)
    for n in s.get("notes", ()):
        print(f"  note: {n}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--cases", default=None, help="with --check: only these instances:batch pairs, e.g. 1:1,2:4")
    ap.add_argument("--models", default="resnet18,mobilenet_v2,squeezenet1_0")
    ap.add_argument("--scenarios", default="server,offline")
    ap.add_argument("--db", default=str(Path("benchmarks/data/serving.db")))
    ap.add_argument("--json", default=None)
    ap.add_argument("--slo-factors", default="3", help="server: SLOs as multiples of the best single-stream latency")
    ap.add_argument("--single-ms", type=float, default=None,
                    help="server, one model: its best single-stream latency as measured before (skips that study)")
    a = ap.parse_args()
    results: dict[str, Any] = {}
    if a.check:
        results["check"] = check(cases=a.cases)
    else:
        results["studies"] = []
        for s in a.scenarios.split(","):
            for m in a.models.split(","):
                single_ms = a.single_ms  # the single-stream study runs once per model
                for f in (a.slo_factors.split(",") if s == "server" else ["0"]):
                    r = study(m, s, a.db, float(f), single_ms)
                    single_ms = r.get("single_stream_ms", single_ms)
                    results["studies"].append(r)
        for scenario in a.scenarios.split(","):
            key = "vs_best_peer" if scenario == "server" else "vs_openvino_throughput"
            ratios = [r[key]["ratio"] for r in results["studies"]
                      if r["scenario"] == scenario and r.get(key) and r[key].get("ratio")]
            if ratios:
                print(f"{scenario}: geomean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x over "
                      f"{'the best peer' if scenario == 'server' else 'the THROUGHPUT hint'} ({len(ratios)} models)")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
