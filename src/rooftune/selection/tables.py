"""Cost tables of a network's convolutions: predicted by a performance model, or profiled (the
oracle). Each row is a layer, each column a primitive, an entry the seconds it takes there
(infinity where the primitive does not apply)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rooftune.primitives import get_primitive
from rooftune.selection.graph import ConvGraph
from rooftune.selection.solve import DEFAULT, CostTable


def predicted_table(graph: ConvGraph, model: Any, primitives: Sequence[str]) -> CostTable:
    """Costs from a performance model; a primitive that does not support a layer, or that the
    model has no data for, costs infinity there."""
    pred = model.predict(graph.specs) if len(graph) else np.zeros((0, len(model.primitives_)))
    times = np.full((len(graph), len(primitives)), np.inf)
    for j, name in enumerate(primitives):
        if name not in model.primitives_:
            continue
        col = model.primitives_.index(name)
        prim = get_primitive(name)
        for i, spec in enumerate(graph.specs):
            if prim.supports(spec) is True and math.isfinite(pred[i, col]):
                times[i, j] = pred[i, col]
    d = primitives.index(DEFAULT)
    times[:, d] = np.where(np.isfinite(times[:, d]), times[:, d], 1.0)  # the default path always applies
    return CostTable(graph, list(primitives), times, model.predict_conversion(graph.specs),
                     model.extrapolated(graph.specs))


def profiled_table(graph: ConvGraph, data: Any, primitives: Sequence[str]) -> tuple[CostTable | None, list[str]]:
    """Costs from profiled rows (the oracle), or None and the layers that were never profiled."""
    index = {s.key(): i for i, s in enumerate(data.specs)}
    missing = [graph.names[i] for i, s in enumerate(graph.specs) if s.key() not in index]
    if missing or not len(graph):
        return None, missing
    times = np.full((len(graph), len(primitives)), np.inf)
    conv = np.zeros(len(graph))
    for i, s in enumerate(graph.specs):
        row = data.times[index[s.key()]]
        for j, name in enumerate(primitives):
            if name in data.primitives:
                t = row[data.primitives.index(name)]
                if not np.isnan(t):
                    times[i, j] = t
        tr = data.transforms.get(s.key(), {})
        both = [tr[n] for n in ("nchw-to-nhwc", "nhwc-to-nchw") if n in tr]
        conv[i] = sum(both) / len(both) if both else 0.0
    d = primitives.index(DEFAULT)
    if not np.all(np.isfinite(times[:, d])):
        return None, [graph.names[i] for i in np.where(~np.isfinite(times[:, d]))[0]]
    return CostTable(graph, list(primitives), times, conv, np.zeros(len(graph), bool)), []

