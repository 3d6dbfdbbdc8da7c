"""What a tuning study's final comparisons cost, measured against the model the study keeps time by.

    .venv/bin/python benchmarks/final_pair_cost.py [MODEL] [--pairs 1,2]

Runs the five baselines of `rooftune tune` as trials (each process's start is timed apart from its
preparation), then compares onnxruntime-default (or the first baseline that ran) interleaved with
each other baseline over 1 and 2 fresh pairs of processes, with the artifacts cached as in a
study's final phase. Prints each comparison's wall time beside `comparison_s` at the start the
study would estimate (`pair_start_s` over the trials), and each process's ready time.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="resnet50")
    ap.add_argument("--pairs", default="1,2", help="pairs of processes per comparison to measure")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pair-cost-"))
    try:
        return run(args.model, [int(p) for p in args.pairs.split(",")], workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(model: str, pair_counts: list[int], workdir: Path) -> int:
    import rooftune.tuning.trial as trial
    from rooftune.platform import current_platform
    from rooftune.runtimes import chosen_runtimes
    from rooftune.tuning.compare import COMPARE_POLICY, comparison_s, interleaved, pair_start_s
    from rooftune.tuning.guidelines import baselines
    from rooftune.tuning.study import TRIAL_POLICY, Setup, _evaluate

    platform = current_platform()
    available, _ = chosen_runtimes(None)
    setup = Setup({"model": model, "inputs": None, "options": {}}, workdir)
    setup.files(1)
    ready = trial.Worker.ready

    def timed_ready(self: Any) -> dict[str, Any]:
        fresh = not self.info
        info = ready(self)
        if fresh:
            print(f"    {self.config.name:22s} ready in {info['start_s'] + info['prepare_s']:5.2f} s, "
                  f"preparing {info['prepare_s']:5.2f} s", flush=True)
        return info

    trial.Worker.ready = timed_ready  # type: ignore[method-assign]
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}; {model}")
    results = []
    for cfg in baselines(platform, available):
        t0 = time.perf_counter()
        r = _evaluate(cfg, setup, TRIAL_POLICY)
        print(f"trial {cfg.name}: {time.perf_counter() - t0:.1f} s, start {r.start_s:.2f} s, ok {r.ok}", flush=True)
        results.append(r)
    ok = [r for r in results if r.ok]
    if len(ok) < 2:
        print("fewer than two baselines ran")
        return 1
    start = pair_start_s(results, platform.usable_cores)  # as a study does: every trial that timed its start
    best = next((r for r in ok if r.config.name == "onnxruntime-default"), ok[0])
    print(f"estimated start of a pair: {start:.2f} s")
    for other in ok:
        if other.config.key() == best.config.key():  # (a study never compares twins)
            continue
        for pairs in pair_counts:
            t0 = time.perf_counter()
            c = interleaved(best.config, other.config, setup, pairs=pairs)
            took = time.perf_counter() - t0
            print(f"{best.config.name} against {other.config.name} over {pairs} pair(s): {took:.1f} s "
                  f"(model {comparison_s(pairs, start, COMPARE_POLICY):.1f} s), ratio {c['ratio']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
