"""How long selecting takes: the seconds to choose a primitive for every convolution of a network
with a performance model, the figure `rooftune train --eval` reports beside the model's accuracy."""

from __future__ import annotations

import time
from typing import Any


def select_time(model: Any, name: str = "resnet50", batch: int = 1) -> dict[str, Any]:
    """Seconds to select a primitive for every convolution of ``name`` with ``model``: features,
    predictions and the layout-aware solve (the graph is read once, outside the timing)."""
    from rooftune.selection import candidate_primitives, conv_graph, layout_aware, predicted_table
    from rooftune.workload import load_workload

    wl = load_workload(name, batch=batch, check=False)
    graph = conv_graph(wl.module, list(wl.inputs))
    prims = candidate_primitives()
    t0 = time.perf_counter()
    layout_aware(predicted_table(graph, model, prims))
    return {"model": name, "layers": len(graph), "seconds": time.perf_counter() - t0}
