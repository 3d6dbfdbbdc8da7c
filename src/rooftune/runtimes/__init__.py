"""Runtimes behind one interface (see :mod:`rooftune.runtimes.base` for the contract), by name in
:mod:`rooftune.runtimes.registry`; what a configuration may set for each is declared in
:mod:`rooftune.runtime_options`.
"""

from __future__ import annotations

from rooftune.runtimes.base import Prepared, Runtime, like_output, output_tensors
from rooftune.runtimes.registry import RUNTIMES, available_runtimes, chosen_runtimes, get_runtime

__all__ = ["RUNTIMES", "Prepared", "Runtime", "available_runtimes", "chosen_runtimes", "get_runtime", "like_output", "output_tensors"]
