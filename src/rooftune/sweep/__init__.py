"""Kernel-family sweeps: a family (conv2d, lstm) over a grid of parameters, in each pass,
precision and variant, every point timed, checked against fp32 and placed on the time-based
roofline: ``rooftune.sweep.sweep("conv2d", ...)`` (:mod:`rooftune.sweep.dispatch`).
"""

from __future__ import annotations

from rooftune.sweep.base import PASSES, Case, Family
from rooftune.sweep.cluster import FleetSweep
from rooftune.sweep.dispatch import sweep
from rooftune.sweep.export import export
from rooftune.sweep.families import FAMILIES, get_family
from rooftune.sweep.grid import parse_values
from rooftune.sweep.plan import CPU_PRECISIONS, CUDA_PRECISIONS, PointSpec, Skipped, Variant
from rooftune.sweep.point import SweepPoint
from rooftune.sweep.run import SweepResult

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

