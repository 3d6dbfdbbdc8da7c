"""FLOPs and compulsory bytes of every op of an op graph (see :mod:`rooftune.costs.formulas`)."""

from __future__ import annotations

from rooftune.costs.formulas import FORMULAS, OpCost
from rooftune.costs.lookup import cost_of, costs_of, formula_view

__all__ = ["FORMULAS", "OpCost", "cost_of", "costs_of", "formula_view"]
