"""Workloads: models by name, example inputs, and their op graphs with concrete shapes."""

from __future__ import annotations

from rooftune.workload.builtin import BUILTINS
from rooftune.workload.frameworks import capture, is_tensorflow
from rooftune.workload.graph import OpGraph, OpNode, TensorMeta, capture_export, capture_hooks
from rooftune.workload.keras_models import KERAS_APPLICATIONS, KerasWorkload
from rooftune.workload.models import Workload, eval_mode, load_workload, parse_options, run_once, zoo_names
from rooftune.workload.shapes import format_shape, parse_shape

__all__ = [
    "BUILTINS",
    "KERAS_APPLICATIONS",
    "KerasWorkload",
    "OpGraph",
    "OpNode",
    "TensorMeta",
    "Workload",
    "capture",
    "capture_export",
    "capture_hooks",
    "eval_mode",
    "format_shape",
    "is_tensorflow",
    "load_workload",
    "parse_options",
    "parse_shape",
    "run_once",
    "zoo_names",
]
