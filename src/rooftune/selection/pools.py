"""Primitives checked inside the network, in groups: those that run on a thread pool of their
own, and the fast algorithms (Winograd, FFT), whose profiled times the selection trusts least.

Every primitive but two runs its threads on the OpenMP pool that ATen, oneDNN and MKL share;
NNPACK runs on its own pthreadpool and ONNX Runtime's MLAS on its own pool. Profiled alone, such a
primitive never meets OpenMP; inside a network it starts while OpenMP's workers still spin after
the layer before (libgomp's default wait policy) and the two pools contend for the cores: the
layer then takes longer than profiled, by a factor that varies from one call to the next, and
with OMP_WAIT_POLICY=passive the contention goes (BENCHMARKS.md, perfmodel Run 16).

A cost per layer measured on one layer swings too much to be added to a table. So the decision is
taken where it shows: when a selection puts layers in such a group, the same network solved
without that group is rewritten too, and the two are measured against each other, interleaved,
end to end. The group stays only if it made the network faster with the whole interval; the
decision holds for every table of that network (the predicted one, the best uniform's, the
oracle's).

Winograd and FFT form one group (:data:`FAST_ALGORITHMS`): their profiled rows repeat the least
of all primitives (a row's passes and a layer's time from one process to the next differ more
than oneDNN's), and the shipped base models predict them too fast more often than the others, so
a network can run slower with them than its table says. Their weights read from memory are not
the cause (a cold-cache profile ranks them as a warm one does). BENCHMARKS.md, perfmodel Runs 20
and 21, has the figures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rooftune.primitives import get_primitive
from rooftune.units import ci_text

#: The thread pool a primitive runs on unless it says otherwise.
OPENMP = "openmp"
#: The group of the fast algorithms on OpenMP, whose prepared weights are a transform (Winograd, FFT).
FAST_ALGORITHMS = "fast algorithms"


@functools.cache
def check_group(name: str) -> str:
    """The group a selection that uses the primitive ``name`` is checked for: its thread pool when
    it has one of its own, :data:`FAST_ALGORITHMS` for Winograd and FFT, else OPENMP (no check).
    Read once per name: building a primitive is not free, and a solve asks for every layer's."""
    p = get_primitive(name)
    if p.thread_pool == OPENMP and p.fast_algorithm:
        return FAST_ALGORITHMS
    return p.thread_pool


@dataclass(frozen=True)
class GroupCheck:
    """The network with ``layers`` layers in ``group`` against the same network solved without
    that group: ``speedup`` = time without / time with (> 1: the group helps), with its 95 % CI;
    ``kept`` when the whole interval lies above 1. ``speedup`` is None when nothing was measured."""

    group: str
    primitives: tuple[str, ...]
    layers: int
    speedup: float | None
    ci: tuple[float, float] | None
    kept: bool

    def describe(self) -> str:
        fast = self.group == FAST_ALGORITHMS
        kind = "fast algorithm, its profiled times the least sure" if fast else f"its own thread pool, {self.group}"
        what = f"{', '.join(self.primitives)} ({kind}) on {self.layers} layer(s)"
        if self.speedup is None or self.ci is None:
            return f"{what}: not measured inside the network against the other primitives (no measurement asked), kept"
        verdict = "kept" if self.kept else "left out of every selection of this network"
        without = "them" if fast else "that pool"
        return (f"{what}: the network ran {self.speedup:.3f}x as fast as the same network solved without {without} "
                f"({ci_text(*self.ci, 3, '95 % CI ')}, interleaved): {verdict}")


def without_groups(table: Any, groups: set[str]) -> Any:
    """A copy of ``table`` in which the primitives of ``groups`` apply to no layer."""
    if not groups:
        return table
    times = table.times.copy()
    for j, name in enumerate(table.primitives):
        if check_group(name) in groups:
            times[:, j] = np.inf
    return replace(table, times=times)


def solve_checking_groups(table: Any, solve: Callable[[Any], Any], checks: dict[str, GroupCheck],
                          check: Callable[[str, Any, Any], GroupCheck],
                          progress: Callable[[str], None] | None = None) -> Any:
    """Solve ``table`` without the groups ``checks`` left out; while the selection puts layers in
    a group not yet checked, ``check(group, selection, selection solved without it)`` decides, and
    the table is solved again. ``checks`` gains each decision (shared by the tables of one network)."""
    say = progress or (lambda _m: None)
    while True:
        out = {g for g, c in checks.items() if not c.kept}
        sel = solve(without_groups(table, out))
        new = [check_group(c.primitive) for c in sel.choices if check_group(c.primitive) not in (OPENMP, *checks)]
        if not new:
            return sel
        group = new[0]
        say("measuring the network with and without " + ("its fast algorithms" if group == FAST_ALGORITHMS
                                                         else f"{group}'s primitives"))
        checks[group] = check(group, sel, solve(without_groups(table, out | {group})))


__all__ = ["OPENMP", "FAST_ALGORITHMS", "GroupCheck", "check_group", "solve_checking_groups", "without_groups"]
