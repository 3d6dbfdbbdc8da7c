"""Kernel-family sweeps: a family (conv2d, lstm) over a grid of parameters, in each pass,
precision and variant, every point timed, checked against fp32 and placed on the time-based
roofline (:func:`sweep`).

The module object is callable: ``rooftune.sweep("conv2d", ...)`` is :func:`sweep`, as
``rooftune.machine(...)`` is its package's function.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from rooftune.sweep.base import PASSES, Case, Family
from rooftune.sweep.cluster import FleetSweep, sweep_on_cluster
from rooftune.sweep.export import export
from rooftune.sweep.families import FAMILIES, get_family
from rooftune.sweep.grid import parse_values
from rooftune.sweep.plan import CPU_PRECISIONS, CUDA_PRECISIONS, PointSpec, Skipped, Variant
from rooftune.sweep.point import SweepPoint
from rooftune.sweep.run import SweepResult
from rooftune.sweep.run import sweep as sweep_here

__all__ = [
    "CPU_PRECISIONS",
    "CUDA_PRECISIONS",
    "FAMILIES",
    "PASSES",
    "Case",
    "Family",
    "FleetSweep",
    "PointSpec",
    "Skipped",
    "SweepPoint",
    "SweepResult",
    "Variant",
    "export",
    "get_family",
    "parse_values",
    "sweep",
]


def sweep(family: str, grid: Any = None, *, cluster: str | None = None, **kwargs: Any) -> Any:
    """:func:`rooftune.sweep.run.sweep` (its arguments and result) on this machine; with ``cluster``
    (a Ray head's ``HOST:PORT``) on every platform of the cluster's nodes, into the store they
    share (:mod:`rooftune.sweep.cluster`), each node's points stored under its own platform:
    returns a :class:`FleetSweep`, one :class:`SweepResult` per platform."""
    if cluster is None:
        return sweep_here(family, grid, **kwargs)
    return sweep_on_cluster(cluster, family, grid, **kwargs)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
