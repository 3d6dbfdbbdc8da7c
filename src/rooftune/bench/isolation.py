"""Measurement in a fresh Python process.

Thread pools, environment variables (OMP_*, LD_PRELOAD ...) and allocator state can only be set
when a process starts, and a crash of the timed code must not take the caller down. The child
imports ``target`` ("package.module:factory"), calls ``factory(**kwargs)`` outside the timed
region to get the callable, times it with :func:`rooftune.bench.measure` and sends the
Measurement back as JSON on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, replace
from typing import Any

from rooftune.bench.measurement import Measurement, Policy
from rooftune.errors import InvalidArgument, MeasurementError
from rooftune.fileio import pipe_json
from rooftune.platform.processes import python_command, run

#: Seconds a child may take beyond the measurement budget: interpreter start and imports
#: (torch alone takes 1-3 s on a small machine).
STARTUP_ALLOWANCE_S = 60.0


def measure_isolated(
    target: str,
    kwargs: dict[str, Any] | None = None,
    *,
    label: str,
    params: dict[str, Any] | None = None,
    policy: Policy | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    platform_id: str | None = None,
) -> Measurement:
    """Measure ``target``'s callable in a subprocess; ``env`` entries are added to its environment.

    Raises MeasurementError when the child fails, crashes or exceeds ``timeout_s``.
    """
    if ":" not in target:
        raise InvalidArgument("target", target, "expected 'package.module:factory'")
    policy = policy or Policy()
    request = {
        "target": target,
        "kwargs": kwargs or {},
        "label": label,
        "params": params or {},
        "policy": asdict(policy),
        "platform_id": platform_id,
    }
    child_env = dict(os.environ)
    child_env.update(env or {})
    limit = timeout_s if timeout_s is not None else policy.budget_s + STARTUP_ALLOWANCE_S
    try:
        # a group of its own, killed whole on the time limit; -P: the working directory's files do
        # not replace the modules the child imports (the target is imported from it by name)
        proc = run(python_command("rooftune.bench._child"), input=pipe_json(request), env=child_env, timeout_s=limit)
    except subprocess.TimeoutExpired as exc:
        raise MeasurementError(f"{label}: subprocess exceeded its time limit of {limit:.0f} s") from exc
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise MeasurementError(f"{label}: subprocess failed (exit {proc.returncode}): {last}")
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise MeasurementError(f"{label}: subprocess returned no measurement") from exc
    m = Measurement.from_dict(result)
    return replace(m, method=replace(m.method, isolation="subprocess"))
