"""Ceilings: the measured roofline of a platform, and the one function that gets them.

The result type is :class:`rooftune.machine.cpu_ceilings.Ceilings`; the probes run in
:mod:`rooftune.machine.cpu_run`, phase by phase, the bandwidth sweep's plan and end rule are in
:mod:`rooftune.machine.sweep_plan`; what a CPU and a CUDA device share (the result's fields, the
effort levels, step timing, the rules that assemble a result) is in :mod:`rooftune.machine.roofline`,
and the store's part (a stored result, a comparison with the earlier runs) in
:mod:`rooftune.machine.stored`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rooftune.errors import as_names
from rooftune.machine.cpu_ceilings import (
    PRECISIONS,
    Ceilings,
    default_threads,
    level_capacities,
    native_support,
    validate_precisions,
    validate_threads,
)
from rooftune.machine.roofline import SWEEP_ARRAYS_FACTOR
from rooftune.machine.stored import stored_or_measured
from rooftune.machine.sweep_plan import SWEEP_MEMORY_SHARE
from rooftune.platform import Platform
from rooftune.platform.sysfs import available_memory

# Importable from here too: the result type and its vocabulary (defined in
# rooftune.machine.cpu_ceilings, below the run that builds it), and the sweep's memory budget that
# benchmarks/ceilings_vs_likwid.py reads.
__all__ = [
    "PRECISIONS",
    "SWEEP_ARRAYS_FACTOR",
    "SWEEP_MEMORY_SHARE",
    "Ceilings",
    "available_memory",
    "default_threads",
    "get_ceilings",
    "level_capacities",
    "measure_ceilings",
    "native_support",
    "validate_precisions",
    "validate_threads",
]


def measure_ceilings(
    platform: Platform,
    *,
    threads: tuple[int, ...],
    precisions: tuple[str, ...] = PRECISIONS,
    quick: bool = False,
    progress: Any = None,
) -> tuple[Ceilings, list[Any]]:
    """Run every probe; returns the Ceilings and the Measurements behind them."""
    from rooftune.machine.cpu_run import CpuRun

    run = CpuRun(platform, threads=threads, precisions=precisions, quick=quick, progress=progress)
    return run.run(), run.measurements


def get_ceilings(
    *,
    threads: Sequence[int] | None = None,
    precisions: Sequence[str] | None = None,
    quick: bool = False,
    refresh: bool = False,
    db: str | None = None,
    store: Any = None,
    platform: Platform | None = None,
    progress: Any = None,
) -> Ceilings:
    """This platform's ceilings: from the store when measured before (unless ``refresh``), else
    measured now and stored. A quick result satisfies only a quick request.

    Raises InvalidArgument for a bad thread count or precision and StoreError for a bad store,
    before anything is measured or written.
    """
    from rooftune.platform import current_platform
    from rooftune.store import open_store

    platform = platform or current_platform()
    th = validate_threads(threads, platform.usable_cores)
    prec = validate_precisions(as_names(precisions, "precisions"))
    own_store = store is None
    store = open_store(store or db)
    wanted = {"fp32": "fp32", "fp64": "fp64", "bf16": "gemm_bf16", "int8": "gemm_int8"}

    def complete(cached: Ceilings) -> bool:
        have = set(cached.peak_flops) | set(cached.skipped) | set(cached.peak_flops_per_thread)
        return all(wanted[p] in have for p in prec)

    try:
        return stored_or_measured(
            store, platform, threads=th, quick=quick, refresh=refresh,
            load=lambda data: Ceilings.from_dict(data, from_store=True), complete=complete,
            measure=lambda: measure_ceilings(platform, threads=th, precisions=prec, quick=quick,
                                             progress=progress))
    finally:
        if own_store:
            store.close()
