"""What a configuration may set for each runtime: its name, its own options with their allowed
values, what it runs where a configuration leaves one out, and what a training step may set.

Declared here, below :mod:`rooftune.runconfig` (which checks a configuration against it) and the
runtimes (whose classes take their options from it), so that reading or checking a configuration
imports no runtime and no framework: this module imports nothing of rooftune.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RuntimeOptions:
    """What a configuration may set for one runtime: its own ``options`` with their allowed values,
    what it runs where a configuration leaves one out (``absent``: each of ``options`` has one,
    one of its allowed values), and ``train_options``, what a training step's configuration may
    set besides (empty for a runtime that cannot train)."""

    options: Mapping[str, tuple[Any, ...]]
    absent: Mapping[str, Any]
    train_options: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    #: Options a peer's configuration sets and the search never varies (``absent`` gives what
    #: every other configuration runs): outside the search space, so that they change no study's key.
    peer_options: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    @property
    def settable(self) -> dict[str, tuple[Any, ...]]:
        """Every option a configuration of this runtime may set, with its allowed values."""
        return {**self.options, **self.train_options, **self.peer_options}


#: How a training step's optimizer update runs: torch's default choice, the multi-tensor
#: (``foreach``) kernels, or the fused kernels (one kernel per parameter group; on CPU since torch 2.4).
OPTIMIZER_IMPLS = ("default", "foreach", "fused")
#: What a training step's configuration may set besides a runtime's own options.
TRAIN_OPTIONS: Mapping[str, tuple[Any, ...]] = {"optimizer": OPTIMIZER_IMPLS}

#: Runtime name -> its options, in the order errors list them (the runtimes' registry's order).
RUNTIME_OPTIONS: Mapping[str, RuntimeOptions] = {
    "eager": RuntimeOptions({}, {}, TRAIN_OPTIONS),
    "torchscript": RuntimeOptions({}, {}),
    "compile": RuntimeOptions({"mode": ("default", "max-autotune-no-cudagraphs")}, {"mode": "default"},
                              TRAIN_OPTIONS),
    "onnxruntime": RuntimeOptions(
        {
            "execution_mode": ("sequential", "parallel"),
            "graph_optimization": ("basic", "extended", "all"),
            "spinning": (True, False),
            # "winograd": the 3x3 convolutions measured faster that way computed by Winograd
            # F(4x4,3x3) in the graph (rooftune.runtimes.winograd_onnx); fp32 only
            "conv": ("direct", "winograd"),
        },
        {"execution_mode": "sequential", "graph_optimization": "all", "spinning": True, "conv": "direct"}),
    "openvino": RuntimeOptions(
        {"hint": ("LATENCY", "THROUGHPUT"), "streams": (1, 2), "pinning": (False, True),
         "source": ("framework", "onnx"),
         # "winograd" (source=onnx, fp32): the 3x3 convolutions OpenVINO runs faster that way
         # computed by Winograd F(4x4,3x3) in the ONNX graph it reads
         # (rooftune.runtimes.winograd_onnx, each layer measured with OpenVINO)
         "conv": ("direct", "winograd")},
        {"hint": "LATENCY", "streams": 1, "pinning": False, "source": "framework", "conv": "direct",
         "quantizer": "default"},
        # "accuracy-control" (int8 with the user's data): NNCF's quantize_with_accuracy_control, the
        # peer that reverts layers to the original precision until the metric's drop is in budget
        peer_options={"quantizer": ("default", "accuracy-control")}),
    "ncnn": RuntimeOptions({"conv": ("winograd", "direct")}, {"conv": "winograd"}),
    "tensorflow": RuntimeOptions({"onednn": (True, False), "xla": (False, True), "remapper": (True, False)},
                                 {"onednn": True, "xla": False, "remapper": True}),
}
