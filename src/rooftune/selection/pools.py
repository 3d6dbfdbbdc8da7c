"""Primitives checked inside the network: those that run on a thread pool of their own, and those
whose prepared weights are a transform larger than the layer's own.

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

Winograd's and FFT's transformed weights are checked the same way, as one group
(:data:`TRANSFORMED`). A campaign times every row with the layer's weights in the caches; inside
a network they come from memory, and Winograd F(4x4)'s are four times the direct ones. On the
Zen 4 VM, a 3x3 layer of 256 channels at 28x28 ran on pre-packed oneDNN in 0.895x Winograd
F(4x4)'s time warm and 0.705x with the caches evicted before every call; a base model that put
Winograd F(4x4) on three such layers of wide_resnet50_2 selected a network 0.943x as fast as
one without them (BENCHMARKS.md, perfmodel Run 20).
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
#: The group of the primitives on OpenMP whose prepared weights are transformed (Winograd, FFT).
TRANSFORMED = "transformed weights"


@functools.cache
def pool_of(name: str) -> str:
    """What a selection that uses the primitive ``name`` is checked for: its thread pool when it
    has one of its own, :data:`TRANSFORMED` when its weights are transformed, else OPENMP (no check).
    Read once per name: building a primitive is not free, and a solve asks for every layer's."""
    p = get_primitive(name)
    if p.thread_pool == OPENMP and p.transformed_weights:
        return TRANSFORMED
    return p.thread_pool


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
        transformed = self.pool == TRANSFORMED
        kind = "weights transformed, profiled warm" if transformed else f"its own thread pool, {self.pool}"
        what = f"{', '.join(self.primitives)} ({kind}) on {self.layers} layer(s)"
        if self.speedup is None or self.ci is None:
            return f"{what}: not measured inside the network against the other primitives (no measurement asked), kept"
        verdict = "kept" if self.kept else "left out of every selection of this network"
        without = "them" if transformed else "that pool"
        return (f"{what}: the network ran {self.speedup:.3f}x as fast as the same network solved without {without} "
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
        say("measuring the network with and without " + ("its transformed-weight primitives" if pool == TRANSFORMED
                                                         else f"{pool}'s primitives"))
        checks[pool] = check(pool, sel, solve(without_pools(table, out | {pool})))


__all__ = ["OPENMP", "TRANSFORMED", "PoolCheck", "pool_of", "solve_checking_pools", "without_pools"]
