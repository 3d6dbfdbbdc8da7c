"""A platform's or a device's ceilings from the store, or measured now, compared with the earlier
runs on the same platform and stored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

#: A ceiling this far below the best earlier run of the same effort on the same platform draws a
#: warning: the hardware and software are the same (the platform id says so), so most likely the host
#: was busier.
BELOW_BEST = 0.10


def below_earlier_runs(ceilings: Any,
                       history: Sequence[dict[str, Any]]) -> tuple[dict[str, float], str | None]:
    """Each ceiling of ``ceilings`` (a Ceilings or a GpuCeilings: FMA and GEMM peaks, bandwidth per
    level) that lies more than :data:`BELOW_BEST` below the best of the earlier runs in ``history``
    (their JSON form), as this run / that best; and a warning naming them, or None.

    Steal time catches a hypervisor that takes the CPU away; another tenant on the SMT siblings, the
    shared L3 or the memory bus slows the kernels without it (on a shared VM a level's bandwidth can
    differ by 2x between two runs with no steal: BENCHMARKS.md, "Ceilings against likwid-bench"), and
    only an earlier run on the same platform shows it."""
    best: dict[str, float] = {}
    for run in history:
        values = {**{k: v for k, v in run.get("peak_flops", {}).items() if isinstance(v, (int, float))},
                  **run.get("bandwidth", {})}
        for name, value in values.items():
            best[name] = max(best.get(name, 0.0), float(value))
    now = {**ceilings.peak_flops, **ceilings.bandwidth}
    below = {name: now[name] / best[name] for name in now
             if name in best and now[name] < (1 - BELOW_BEST) * best[name]}
    if not below:
        return {}, None
    parts = ", ".join(f"{name} {ratio - 1:+.0%}" for name, ratio in below.items())
    return below, (f"below the best of {len(history)} earlier run(s) on this platform by more than "
                   f"{BELOW_BEST:.0%}: {parts} (same hardware and software, so most likely a busier host: "
                   "another tenant on the same cores, caches or memory); re-run with --refresh when it is "
                   "quieter")


def stored_or_measured(store: Any, platform: Any, *, threads: Sequence[int], quick: bool, refresh: bool,
                       load: Callable[[dict[str, Any]], Any], complete: Callable[[Any], bool],
                       measure: Callable[[], tuple[Any, list[Any]]]) -> Any:
    """The newest stored ceilings of ``platform`` (a Platform or a GpuDevice) on ``threads`` that
    ``complete`` accepts (unless ``refresh``); else ``measure()``d now, compared with the earlier
    runs of the same effort (:func:`below_earlier_runs`) and stored with their Measurements in one
    transaction."""
    if not refresh:
        data = store.load_ceilings(platform.id, threads=threads, allow_quick=quick)
        if data is not None:
            cached = load(data)
            if complete(cached):
                return cached
    ceilings, measurements = measure()
    history = store.ceilings_history(platform.id, threads=threads, quick=quick)
    below, warning = below_earlier_runs(ceilings, history)
    if warning:
        ceilings = replace(ceilings, warnings=(*ceilings.warnings, warning),
                           details={**ceilings.details, "below_earlier_runs": below})
    import rooftune

    store.save_ceilings(platform, ceilings.to_dict(), quick=quick, threads=threads,
                        measurements=[m.to_dict() for m in measurements],
                        rooftune_version=rooftune.__version__)
    return ceilings
