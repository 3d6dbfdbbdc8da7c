"""rooftune: why a deep-learning model runs this fast on this machine, and how to make it faster.

Importing rooftune is cheap: heavy modules (torch, numba, SQLAlchemy) load only when the function
that needs them is called.

``rooftune.machine(...)`` measures (or loads) the machine's ceilings; the same name is the
``rooftune.machine`` package, whose module object is callable so both spellings work.
"""

from __future__ import annotations

import importlib
from typing import Any

from rooftune.errors import InvalidArgument, MeasurementError, RooftuneError, StoreError

__version__ = "0.1.0"

__all__ = [
    "InvalidArgument",
    "MeasurementError",
    "RooftuneError",
    "StoreError",
    "__version__",
    "machine",
]

_LAZY_SUBPACKAGES = {"machine", "bench", "platform", "store", "report"}


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"rooftune.{name}")
    raise AttributeError(f"module 'rooftune' has no attribute {name!r}")
