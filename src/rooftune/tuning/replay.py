"""Run a saved configuration the way a user's program would, and time it with the harness.

    rooftune exec --config best.json -- python -m rooftune.tuning.replay best.json [--seconds S]

``rooftune exec`` sets the configuration's environment (threads, allocator, OpenMP) at process
start; this program then sets torch's thread pools as the configuration says, prepares the
runtime's artifact, checks the output against the fp32 eager output of the same inputs (a
wrong output exits 1 and prints no time) and prints one JSON line: the median time per call,
its IQR and sample count, and the check's figures. A file written by ``rooftune tune --save``
or ``rooftune optimize`` carries the workload it was tuned on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def replay(path: str | Path, seconds: float = 5.0) -> dict[str, Any]:
    import torch

    from rooftune.bench import Policy, measure
    from rooftune.errors import InvalidArgument
    from rooftune.runtimes import first_tensor
    from rooftune.tuning._worker import load_for
    from rooftune.tuning.config import load_config
    from rooftune.tuning.verify import compare_outputs

    # Started by `rooftune exec` with OMP_PROC_BIND set, OpenMP has already pinned this process's
    # main thread to one core, so its affinity no longer shows the cores the threads will use.
    config = load_config(path, usable_cores=os.cpu_count())
    saved = json.loads(Path(path).read_text())
    w = saved.get("workload") if isinstance(saved, dict) else None
    if not w:
        raise InvalidArgument("--config", str(path), "names no workload; write it with rooftune tune --save or rooftune optimize")
    try:  # as a trial's process does
        wl, runtime = load_for(config, w)
    except ValueError as exc:
        raise InvalidArgument("runtime", config.runtime, str(exc)) from None
    with torch.no_grad():
        reference = first_tensor(wl.module(*wl.inputs)).float()
    with tempfile.TemporaryDirectory(prefix="rooftune-replay-") as workdir:
        target = runtime.artifact_file(config, Path(workdir))
        if target is not None and saved.get("artifact"):
            # the artifact the study ran (a Winograd rewrite is the one measured then, not measured
            # again; an int8 model the one quantized then), found beside the configuration file
            # when its path is relative; an OpenVINO IR with its weights
            import shutil

            art = Path(saved["artifact"])
            if not art.is_absolute() and not art.is_file():
                art = Path(path).parent / art.name
            whole = target.suffix != ".xml" or art.with_suffix(".bin").is_file()  # else prepared again
            if art.is_file() and art.name.endswith(target.name) and whole:  # the file this configuration runs
                if target.suffix == ".xml":
                    shutil.copy2(art.with_suffix(".bin"), target.with_suffix(".bin"))
                shutil.copy2(art, target)
        prepared = runtime.prepare(wl, config, Path(workdir), calibration=calibration_for(config, saved, wl.inputs))
        check = compare_outputs(prepared.output(), reference, config.precision)
        result: dict[str, Any] = {"config": config.describe(), "name": config.name, "verify": check,
                                  "threads": torch.get_num_threads()}
        if not check["ok"]:
            return result
        m = measure(prepared.run, label=f"replay.{config.runtime}", policy=Policy(budget_s=seconds, warmup_s=min(0.5, seconds / 5)))
    result.update(median_s=m.median, iqr_s=m.iqr, samples=len(m.samples), cv=m.cv, warnings=list(m.warnings),
                  batch=config.batch, items_per_s=config.batch / m.median)
    if config.instances > 1:
        result["note"] = (f"one instance measured alone; the configuration runs {config.instances} side by side "
                          f"(start one replay per instance to see their combined throughput)")
    return result


def calibration_for(config: Any, saved: dict[str, Any], inputs: Any) -> list[Any]:
    """The calibration set an int8 trial quantized with (seeded, drawn like the workload's
    inputs, of the size the file records); empty for other precisions."""
    if config.precision != "int8":
        return []
    from rooftune.runtimes.quantize import calibration_inputs, check_calibration_size

    return calibration_inputs(inputs, check_calibration_size(saved.get("calibration"), "calibration"))


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
    print(json.dumps(r, default=str))
    return 0 if r["verify"]["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
