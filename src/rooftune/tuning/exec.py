"""Running a program with a saved configuration's environment, as ``rooftune exec`` does: one copy
in place of the calling process, or the configuration's N instances side by side."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from rooftune.errors import InvalidArgument, is_int

#: The most copies one exec starts: far beyond any core count a study tunes for, low enough that a
#: typo (an extra zero) is refused instead of forking thousands of processes.
MAX_INSTANCES = 1024


def exec_config(config: str | Path, cmd: Sequence[str], instances: int | None = None) -> int:
    """Run ``cmd`` with the environment of the configuration saved at ``config`` (by ``rooftune
    tune --save``). One instance replaces this process by ``cmd`` (``os.execvpe``: this call
    does not return), on the configuration's cores where it is pinned. A configuration of N
    concurrent instances (the throughput objective), or ``instances`` > 1, starts that many copies
    side by side, as the study ran them (a pinned configuration's each on cores of its own, as
    PyTorch's launcher pins its --ninstances); each finds ROOFTUNE_INSTANCE (0..N-1) and ROOFTUNE_INSTANCES
    in its environment. Returns the first failing copy's status (128 + N for a copy a signal
    ended), else 0: see :func:`rooftune.platform.processes.run_copies`. Bad arguments raise
    :class:`InvalidArgument` before anything starts."""
    from rooftune.platform.processes import run_copies
    from rooftune.runconfig import load_config

    cmd = list(cmd)
    if not cmd:
        raise InvalidArgument("command", "", "give the command after --, e.g. rooftune exec --config best.json -- "
                              "python run.py")
    cfg = load_config(config)
    n = cfg.instances if instances is None else instances
    if not is_int(n) or not 1 <= n <= MAX_INSTANCES:
        raise InvalidArgument("--instances", n, f"allowed 1..{MAX_INSTANCES}")
    env = {**os.environ, **cfg.environment()}
    cpus = None
    if cfg.pin:
        from rooftune.runconfig import pinned_cpus

        try:  # each copy on its own cores, as the study ran its instances
            cpus = [pinned_cpus(cfg.intra_threads, i) for i in range(int(n))]
        except ValueError:
            raise InvalidArgument("--instances", n, f"allowed where each of them has {cfg.intra_threads} cores of its "
                                  f"own (the configuration is pinned)") from None
        if n == 1:
            os.sched_setaffinity(0, cpus[0])  # inherited by the command run
    if shutil.which(cmd[0]) is None and not os.path.exists(cmd[0]):
        raise InvalidArgument("command", cmd[0], "not found on PATH")
    sys.stdout.flush()
    if n == 1:
        os.execvpe(cmd[0], cmd, env)
    return run_copies(cmd, env, int(n), cpus=cpus)
