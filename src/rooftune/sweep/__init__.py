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
from rooftune.sweep.export import export
from rooftune.sweep.families import FAMILIES, get_family
from rooftune.sweep.grid import parse_values
from rooftune.sweep.plan import CPU_PRECISIONS, CUDA_PRECISIONS, PointSpec, Skipped, Variant
from rooftune.sweep.point import SweepPoint
from rooftune.sweep.run import SweepResult, sweep

__all__ = [
    "CPU_PRECISIONS",
    "CUDA_PRECISIONS",
    "FAMILIES",
    "PASSES",
    "Case",
    "Family",
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


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> SweepResult:
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
