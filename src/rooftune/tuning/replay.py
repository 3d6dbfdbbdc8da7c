"""Run a saved configuration the way a user's program would, and time it with the harness.

    rooftune exec --config best.json -- python -P -m rooftune.tuning.replay best.json [--seconds S]

``rooftune exec`` sets the configuration's environment (threads, allocator, OpenMP) at process
start; this program then sets torch's thread pools as the configuration says, prepares the
runtime's artifact, checks the output against the fp32 eager output of the same inputs (a
wrong output exits 1 and prints no time) and prints one JSON line: the median time per call,
its IQR and sample count, and the check's figures. A file written by ``rooftune tune --save``
or ``rooftune optimize`` carries the workload it was tuned on. It runs what
``rooftune.load_tuned`` gives a user's program. For a configuration of N instances ``rooftune
exec`` starts N replays side by side, each printing its own line (their throughputs add up).
``-P`` keeps the working directory's files from replacing the modules the replay imports (a
``module:callable`` model is still imported from it, by name).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rooftune.fileio import json_text


def replay(path: str | Path, seconds: float = 5.0) -> dict[str, Any]:
    import torch

    from rooftune.bench import Policy, measure
    from rooftune.tuning.deploy import load_saved

    tuned = load_saved(path, name="--config")
    config, check = tuned.config, tuned.check
    result: dict[str, Any] = {"config": config.describe(), "name": config.name, "verify": check,
                              "threads": torch.get_num_threads()}
    try:
        if check is None or not check["ok"]:  # loaded with its check: never None here
            return result
        m = measure(tuned.run, label=f"replay.{config.runtime}", policy=Policy(budget_s=seconds, warmup_s=min(0.5, seconds / 5)))
    finally:
        tuned.close()
    result.update(median_s=m.median, iqr_s=m.iqr, samples=len(m.samples), cv=m.cv, warnings=list(m.warnings),
                  batch=config.batch, items_per_s=config.batch / m.median)
    if tuned.notes:
        result["notes"] = list(tuned.notes)
    return result


def main(argv: list[str] | None = None) -> int:
    from rooftune.errors import RooftuneError

    p = argparse.ArgumentParser(prog="python -m rooftune.tuning.replay", description=__doc__.split("\n")[0])
    p.add_argument("config", help="a configuration file written by rooftune tune --save or rooftune optimize")
    p.add_argument("--seconds", type=float, default=5.0, help="measurement budget (default 5)")
    args = p.parse_args(argv)
    try:
        r = replay(args.config, args.seconds)
    except RooftuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json_text(r, default=str))
    return 0 if r["verify"]["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
