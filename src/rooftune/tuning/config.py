"""The run configuration, as the tuning has always named it: it lives in :mod:`rooftune.runconfig`,
below the runtimes and the tuning that both use it."""

from __future__ import annotations

# importing the runtimes registers each one's options with rooftune.runconfig, which
# RunConfig.validate and RunConfig.option read
import rooftune.runtimes  # noqa: F401
from rooftune.runconfig import (
    ALLOCATOR_LIBRARIES,
    ALLOCATORS,
    JEMALLOC_CONF,
    MEMORY_FORMATS,
    OMP_VARIABLES,
    OPENMP_RUNTIMES,
    PRECISIONS,
    RunConfig,
    allocator_library,
    check_omp,
    intel_openmp_library,
    load_config,
    pinned_cpus,
)

__all__ = [
    "ALLOCATORS",
    "ALLOCATOR_LIBRARIES",
    "JEMALLOC_CONF",
    "MEMORY_FORMATS",
    "OMP_VARIABLES",
    "OPENMP_RUNTIMES",
    "PRECISIONS",
    "RunConfig",
    "allocator_library",
    "check_omp",
    "intel_openmp_library",
    "load_config",
    "pinned_cpus",
]
