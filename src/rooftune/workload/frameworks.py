"""The op graph of any workload: a TensorFlow one's from its step stats
(:mod:`rooftune.workload.tf_graph`), a PyTorch one's through torch.export or module hooks
(:mod:`rooftune.workload.graph`)."""

from __future__ import annotations

from typing import Any

import rooftune.workload.graph as graph
from rooftune.workload.keras_models import KerasWorkload


def capture(wl: Any) -> graph.OpGraph:
    """The op graph of ``wl``, whichever framework runs it."""
    if isinstance(wl, KerasWorkload):
        from rooftune.workload.tf_graph import capture_tf

        return capture_tf(wl)
    return graph.capture(wl)


def is_tensorflow(wl: Any) -> bool:
    """Whether ``wl`` runs on TensorFlow (its runtimes are TensorFlow's and those reading its graph)."""
    return isinstance(wl, KerasWorkload)
