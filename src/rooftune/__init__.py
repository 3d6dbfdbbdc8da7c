"""rooftune: why a deep-learning model runs this fast on this machine, and how to make it faster.

Importing rooftune is cheap: heavy modules (torch, numba, SQLAlchemy) load only when the function
that needs them is called.

``rooftune.machine.get_ceilings(...)`` measures (or loads) the machine's ceilings.
``rooftune.analyze(model, ...)`` places every op of a model on them; ``rooftune.tune``,
``rooftune.select`` and ``rooftune.optimize`` (all of it, end to end, with a report) follow;
``rooftune.load_tuned(path)`` runs a saved configuration in the caller's own process.
``rooftune.sweep.sweep(family, grid)`` sweeps a kernel family (conv2d, lstm) on the time-based
roofline.
"""

from __future__ import annotations

import importlib
from typing import Any

from rooftune.errors import InvalidArgument, MeasurementError, RooftuneError, StoreError, WorkloadError

__version__ = "0.1.0"

__all__ = [
    "InvalidArgument",
    "MeasurementError",
    "RooftuneError",
    "StoreError",
    "WorkloadError",
    "__version__",
    "analyze",
    "load_tuned",
    "machine",
    "optimize",
    "profile",
    "select",
    "sweep",
    "tune",
]

_LAZY_SUBPACKAGES = {"machine", "bench", "platform", "store", "report", "workload", "costs", "analysis", "runtimes",
                     "tuning", "primitives", "profiling", "perfmodel", "selection", "pipeline"}
_LAZY_SUBPACKAGES.add("sweep")
#: Public functions that live in a subpackage: name -> (module, attribute).
_LAZY_FUNCTIONS = {"analyze": ("rooftune.analysis", "analyze"), "tune": ("rooftune.tuning", "tune"),
                   "load_tuned": ("rooftune.tuning.deploy", "load_tuned"),
                   "profile": ("rooftune.profiling", "profile"),
                   "optimize": ("rooftune.pipeline", "optimize"), "select": ("rooftune.selection", "select")}


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"rooftune.{name}")
    if name in _LAZY_FUNCTIONS:
        module, attr = _LAZY_FUNCTIONS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'rooftune' has no attribute {name!r}")
