"""Measured ceilings of the machine: peak FLOP/s per precision and thread count, bandwidth of every
memory level, GEMM roofs and the framework's dispatch overhead (``rooftune.machine.get_ceilings(quick=True)``);
a CUDA device's with :func:`get_gpu_ceilings`.
"""

from __future__ import annotations

from typing import Any

from rooftune.machine.ceilings import (
    PRECISIONS,
    Ceilings,
    get_ceilings,
    measure_ceilings,
    native_support,
    validate_precisions,
    validate_threads,
)
from rooftune.machine.plateaus import LEVELS, Plateau, detect_plateaus, name_plateaus

__all__ = [
    "GPU_PRECISIONS",
    "LEVELS",
    "PRECISIONS",
    "Ceilings",
    "GpuCeilings",
    "Plateau",
    "detect_plateaus",
    "get_ceilings",
    "get_gpu_ceilings",
    "measure_ceilings",
    "name_plateaus",
    "native_support",
    "validate_precisions",
    "validate_threads",
]


#: A CUDA device's ceilings (rooftune.machine.gpu), imported when first asked for: that module
#: brings the timing harness and NumPy, which `import rooftune.machine` does not need.
_GPU_NAMES = ("GPU_PRECISIONS", "GpuCeilings", "get_gpu_ceilings")


def __getattr__(name: str) -> Any:
    if name in _GPU_NAMES:
        import rooftune.machine.gpu as gpu

        return getattr(gpu, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
