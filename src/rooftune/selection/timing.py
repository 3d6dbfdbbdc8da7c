"""How long selecting takes with a performance model: features, predictions and the solve, timed
(the figure `rooftune evaluate` reports beside the model's accuracy)."""

from __future__ import annotations

import time
from typing import Any

from rooftune.selection.graph import conv_graph
from rooftune.selection.solve import candidate_primitives, layout_aware
from rooftune.selection.tables import predicted_table


def select_time(model: Any, name: str = "resnet50", batch: int = 1) -> dict[str, Any]:
    """Seconds to select a primitive for every convolution of ``name`` with ``model``: features,
    predictions and the layout-aware solve (the graph is read once, outside the timing)."""
    from rooftune.workload import load_workload

    wl = load_workload(name, batch=batch, check=False)
    graph = conv_graph(wl.module, list(wl.inputs))
    prims = candidate_primitives()
    t0 = time.perf_counter()
    layout_aware(predicted_table(graph, model, prims))
    return {"model": name, "layers": len(graph), "seconds": time.perf_counter() - t0}
