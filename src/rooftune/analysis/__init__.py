"""Roofline analysis of a model, op by op: placement, the time-based roofline, trajectories."""

from __future__ import annotations

from rooftune.analysis.analyze import (
    DEFAULT_BUDGET_S,
    TOP_N,
    Analysis,
    OpResult,
    analyze,
    analyze_workload,
    write_csv,
)
from rooftune.analysis.findings import describe, reason
from rooftune.analysis.placement import OVERHEAD_FACTOR, Placement, Roofs, place

__all__ = [
    "DEFAULT_BUDGET_S",
    "OVERHEAD_FACTOR",
    "TOP_N",
    "Analysis",
    "OpResult",
    "Placement",
    "Roofs",
    "analyze",
    "analyze_workload",
    "describe",
    "place",
    "reason",
    "write_csv",
]
