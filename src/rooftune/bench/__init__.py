"""The one timing harness: everything rooftune times goes through :func:`measure` or :func:`compare`."""

from __future__ import annotations

from rooftune.bench.isolation import measure_isolated
from rooftune.bench.measurement import Comparison, Measurement, Method, Policy
from rooftune.bench.timer import Clock, compare, measure, measure_parts

__all__ = [
    "Clock",
    "Comparison",
    "Measurement",
    "Method",
    "Policy",
    "compare",
    "measure",
    "measure_isolated",
    "measure_parts",
]
