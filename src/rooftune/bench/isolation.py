"""Measurement in a fresh Python process.

Thread pools, environment variables (OMP_*, LD_PRELOAD ...) and allocator state can only be set
when a process starts, and a crash of the timed code must not take the caller down. The child
(:mod:`rooftune.bench._child`, spoken to over a :class:`~rooftune.platform.worker.Channel`) is
sent the request as one JSON line, imports ``target`` ("package.module:factory"), calls
``factory(**kwargs)`` outside the timed region to get the callable, times it with
:func:`rooftune.bench.measure` and answers with the Measurement as one JSON line.
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from typing import Any

from rooftune.bench.measurement import Measurement, Policy
from rooftune.errors import InvalidArgument, MeasurementError
from rooftune.platform.processes import python_command
from rooftune.platform.worker import Channel, ChildEnded, ChildTimedOut

#: Seconds a child may take beyond the measurement budget: interpreter start and imports
#: (torch alone takes 1-3 s on a small machine).
STARTUP_ALLOWANCE_S = 60.0
#: Seconds a child that closed its stdout has to exit before its group is killed.
EXIT_WAIT_S = 5.0


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
    # a group of its own, killed whole on the time limit and on any exception here (Ctrl-C); -P:
    # the working directory's files do not replace the modules the child imports (the target is
    # imported from it by name)
    channel = Channel(python_command("rooftune.bench._child"), env=child_env, exit_wait_s=EXIT_WAIT_S)
    try:
        channel.send(request)  # (a child that died at once: receive says how it ended)
        result = channel.receive(limit)
    except ChildTimedOut:
        raise MeasurementError(f"{label}: subprocess exceeded its time limit of {limit:.0f} s") from None
    except ChildEnded as ended:
        if ended.returncode == 0:
            raise MeasurementError(f"{label}: subprocess returned no measurement") from None
        last = ended.last_stderr or f"exit status {ended.returncode}"
        raise MeasurementError(f"{label}: subprocess failed (exit {ended.returncode}): {last}") from None
    finally:
        channel.close()
    m = Measurement.from_dict(result)
    return replace(m, method=replace(m.method, isolation="subprocess"))
