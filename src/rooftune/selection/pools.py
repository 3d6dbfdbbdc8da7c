"""Primitives that run on a thread pool of their own, checked inside the network.

Every primitive but two runs its threads on the OpenMP pool that ATen, oneDNN and MKL share;
NNPACK runs on its own pthreadpool and ONNX Runtime's MLAS on its own pool. Profiled alone, such a
primitive never meets OpenMP; inside a network it starts while OpenMP's workers still spin after
the layer before (libgomp's default wait policy) and the two pools contend for the cores. On a
2-core Zen 4 VM, NNPACK's 3x3 layer of resnet50's first stage took 0.78 ms profiled alone and
ran 0.95-1.9x as long as oneDNN's right after a oneDNN layer, from one measurement to the next
in the same process; resnet50 with three NNPACK layers ran 1.04-1.10x slower than with oneDNN on
them, and with OMP_WAIT_POLICY=passive the difference vanished (BENCHMARKS.md, perfmodel Run 16).

A cost per layer measured on one layer swings too much to be added to a table. So the decision is
taken where it shows: when a selection puts layers on such a pool, the same network solved
without that pool is rewritten too, and the two are measured against each other, interleaved,
end to end. The pool stays only if it made the network faster with the whole interval; the
decision holds for every table of that network (the predicted one, the best uniform's, the
oracle's).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rooftune.primitives import get_primitive

#: The thread pool a primitive runs on unless it says otherwise.
OPENMP = "openmp"


@functools.cache
def pool_of(name: str) -> str:
    """The thread pool of the primitive ``name`` (read once per name: building a primitive is
    not free, and a solve asks for every layer's)."""
    return get_primitive(name).thread_pool


@dataclass(frozen=True)
class PoolCheck:
    """The network with ``layers`` layers on ``pool`` against the same network solved without it:
    ``speedup`` = time without / time with (> 1: the pool helps), with its 95 % CI; ``kept`` when
    the whole interval lies above 1. ``speedup`` is None when nothing was measured."""

    pool: str
    primitives: tuple[str, ...]
    layers: int
    speedup: float | None
    ci: tuple[float, float] | None
    kept: bool

    def describe(self) -> str:
        what = f"{', '.join(self.primitives)} (its own thread pool, {self.pool}) on {self.layers} layer(s)"
        if self.speedup is None or self.ci is None:
            return f"{what}: not measured inside the network against OpenMP's primitives (no measurement asked), kept"
        verdict = "kept" if self.kept else "left out of every selection of this network"
        return (f"{what}: the network ran {self.speedup:.3f}x as fast as the same network solved without that pool "
                f"(95 % CI {self.ci[0]:.3f}-{self.ci[1]:.3f}, interleaved): {verdict}")


def without_pools(table: Any, pools: set[str]) -> Any:
    """A copy of ``table`` in which the primitives of ``pools`` apply to no layer."""
    if not pools:
        return table
    times = table.times.copy()
    for j, name in enumerate(table.primitives):
        if pool_of(name) in pools:
            times[:, j] = np.inf
    return replace(table, times=times)


def solve_checking_pools(table: Any, solve: Callable[[Any], Any], checks: dict[str, PoolCheck],
                         check: Callable[[str, Any, Any], PoolCheck],
                         progress: Callable[[str], None] | None = None) -> Any:
    """Solve ``table`` without the pools ``checks`` left out; while the selection puts layers on a
    pool not yet checked, ``check(pool, selection, selection solved without it)`` decides, and the
    table is solved again. ``checks`` gains each decision (shared by the tables of one network)."""
    say = progress or (lambda _m: None)
    while True:
        out = {p for p, c in checks.items() if not c.kept}
        sel = solve(without_pools(table, out))
        new = [pool_of(c.primitive) for c in sel.choices if pool_of(c.primitive) not in (OPENMP, *checks)]
        if not new:
            return sel
        pool = new[0]
        say(f"measuring the network with and without {pool}'s primitives")
        checks[pool] = check(pool, sel, solve(without_pools(table, out | {pool})))


__all__ = ["OPENMP", "PoolCheck", "pool_of", "solve_checking_pools", "without_pools"]
