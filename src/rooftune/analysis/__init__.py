"""Roofline analysis of a model, op by op: placement, the time-based roofline, trajectories."""

from __future__ import annotations

from rooftune.analysis.analyze import DEFAULT_BUDGET_S, analyze, analyze_workload
from rooftune.analysis.findings import describe, reason
from rooftune.analysis.placement import OVERHEAD_FACTOR, Placement, Roofs, place
from rooftune.analysis.result import TOP_N, Analysis, OpResult, write_csv

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
