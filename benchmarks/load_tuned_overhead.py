"""What a user's call costs beyond what the study timed: `rooftune.load_tuned(...)(x)` against the
prepared model's own run on its prepared inputs (what trials and replays time).

    .venv/bin/python benchmarks/load_tuned_overhead.py [--seconds 4] [--json OUT]

For each model and runtime a configuration file is written (2 intra-op threads, no artifact: it
is prepared at load), loaded in this process, and the two calls are interleaved by the harness
(`rooftune.bench.compare`): the ratio is the user's call over the timed run, with its 95 % CI. The
user's call checks the inputs' shapes, converts the torch tensors to the runtime's inputs and
its outputs back to torch tensors in the model's structure; the timed run feeds inputs converted once.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch


def tiny() -> tuple[torch.nn.Module, torch.Tensor]:
    """A model of tens of microseconds, where a call's own overhead shows most."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)), torch.randn(1, 16)


def main() -> None:
    import rooftune
    from rooftune.bench import Policy, compare
    from rooftune.platform import current_platform
    from rooftune.runtimes import get_runtime
    from rooftune.tuning import RunConfig

    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # `load_tuned_overhead:tiny` imports here
    platform = current_platform()
    print(f"# {platform.cpu_model}, {platform.usable_cores} usable cores, platform {platform.id}")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for model in ("load_tuned_overhead:tiny", "lstm", "resnet18"):
            for runtime in ("eager", "onnxruntime", "openvino"):
                if get_runtime(runtime).available():
                    continue
                path = Path(d) / f"{runtime}-{model.replace(':', '_')}.json"
                cfg = RunConfig(runtime=runtime, intra_threads=min(2, platform.usable_cores))
                path.write_text(json.dumps({"config": cfg.to_dict(),
                                            "workload": {"model": model, "inputs": None, "options": {}}}))
                m = rooftune.load_tuned(path)
                xs = tuple(torch.randn_like(x) if x.is_floating_point() else x.clone() for x in m.example_inputs)
                c = compare(lambda m=m, xs=xs: m(*xs), m.run, label_a="user call", label_b="timed run",
                            policy=Policy(budget_s=args.seconds, warmup_s=0.5))
                row = {"model": model.split(":")[-1], "runtime": runtime, "user_call_s": c.a.median,
                       "timed_run_s": c.b.median, "ratio": c.ratio, "ci_low": c.ci[0], "ci_high": c.ci[1]}
                rows.append(row)
                print(f"{row['model']:<10} {runtime:<12} user call {c.a.median * 1e6:10.1f} us   timed run "
                      f"{c.b.median * 1e6:10.1f} us   ratio {c.ratio:.3f} ({c.ci[0]:.3f}-{c.ci[1]:.3f})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "platform_id": platform.id,
                                               "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
