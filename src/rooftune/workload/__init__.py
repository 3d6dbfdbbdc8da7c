"""Workloads: models by name, example inputs, and their op graphs with concrete shapes."""

from __future__ import annotations

from rooftune.workload.builtin import BUILTINS
from rooftune.workload.graph import OpGraph, OpNode, TensorMeta, capture, capture_export, capture_hooks
from rooftune.workload.models import Workload, eval_mode, load_workload, parse_options, run_once, zoo_names
from rooftune.workload.shapes import format_shape, parse_shape

__all__ = [
    "BUILTINS",
    "OpGraph",
    "OpNode",
    "TensorMeta",
    "Workload",
    "capture",
    "capture_export",
    "capture_hooks",
    "eval_mode",
    "format_shape",
    "load_workload",
    "parse_options",
    "parse_shape",
    "run_once",
    "zoo_names",
]
