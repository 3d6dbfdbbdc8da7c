"""Per-layer primitive selection: predicted costs (a performance model) or profiled ones (the
oracle), the layout-aware optimum, the model rewritten and verified, and measured interleaved
against vanilla PyTorch, the best uniform primitive and the oracle selection.

    result = rooftune.selection.select("resnet50", model_path=None)   # the shipped base model
"""

from __future__ import annotations

from rooftune.selection.graph import ConvGraph, conv_graph
from rooftune.selection.network import SELECT_POLICY_BUDGET_S as SELECT_POLICY_BUDGET_S
from rooftune.selection.network import Candidate, SelectResult, select
from rooftune.selection.network import comparison_policy as comparison_policy
from rooftune.selection.network import module_runner as module_runner
from rooftune.selection.rewrite import SelectedConv, Verification, rewrite, verify
from rooftune.selection.saved import load_selected, save_selection
from rooftune.selection.solve import (
    Choice,
    CostTable,
    Selection,
    best_uniform,
    candidate_primitives,
    layout_aware,
    per_layer,
    uniform,
)
from rooftune.selection.tables import predicted_table, profiled_table
from rooftune.selection.timing import select_time as select_time

__all__ = [
    "Candidate", "Choice", "ConvGraph", "CostTable", "SelectResult", "Selection", "SelectedConv", "Verification",
    "best_uniform", "candidate_primitives", "conv_graph", "layout_aware", "load_selected", "per_layer", "predicted_table", "profiled_table",
    "rewrite", "save_selection", "select", "uniform", "verify",
]
