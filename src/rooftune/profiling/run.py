"""A campaign as a user starts one: its specs collected from models and sampling, its arguments
checked, run on this machine (or in a subprocess with an emulated ISA variant)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rooftune.errors import InvalidArgument, as_ints, as_names
from rooftune.profiling.campaign import (
    EXTRA_PASSES,
    PROFILE_PASSES,
    CampaignResult,
    check_campaign,
    check_passes,
    run_campaign,
)
from rooftune.profiling.cluster import FleetCampaign, run_on_fleet
from rooftune.profiling.specs import model_layers, sample_specs

#: ISA variants a campaign can emulate, and the caps each sets for oneDNN, ATen and MKL.
ISA_VARIANTS: dict[str, dict[str, str]] = {
    "avx": {"ONEDNN_MAX_CPU_ISA": "AVX", "ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX"},
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
}
#: Seconds an interrupted ISA-variant run gets to end its current measurement and close its store.
INTERRUPT_GRACE_S = 30.0


def collect_specs(models: Sequence[str] = (), sample: int = 0, batches: Sequence[int] = (1,), seed: int = 0,
                  precisions: Sequence[str] = ("fp32",)) -> tuple[list[tuple[Any, list[str]]], dict[str, list[Any]]]:
    """The specs of a campaign, deduplicated, each with the models (or "sampled") it comes from;
    and each model's layer specs per batch (for the summary)."""
    for b in batches:
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise InvalidArgument("batch", b, "allowed integers >= 1")
    from dataclasses import replace

    sources: dict[str, tuple[Any, list[str]]] = {}
    layers: dict[str, list[Any]] = {}

    def add(spec: Any, source: str) -> None:
        entry = sources.setdefault(spec.key(), (spec, []))
        if source not in entry[1]:
            entry[1].append(source)

    for model in models:
        for b in batches:
            found = model_layers(model, batch=b)
            if not found:
                raise InvalidArgument("model", model, "has no 2-D convolution to profile")
            for dtype in precisions:
                specs = [replace(layer.spec, dtype=dtype) for layer in found]
                layers[f"{model}@b{b}" + ("" if dtype == "fp32" else f"/{dtype}")] = specs
                for s in specs:
                    add(s, model)
    for dtype in precisions:
        for s in sample_specs(sample, batches, seed, dtype):
            add(s, "sampled")
    return list(sources.values()), layers


def profile(models: Sequence[str] = (), *, sample: int = 0, batches: Sequence[int] = (1,),
            threads: Sequence[int] | None = None, primitives: Sequence[str] | None = None,
            precisions: Sequence[str] = ("fp32",), budget_s: float = 3600.0, seed: int = 0, db: str | None = None,
            store: Any = None, progress: Any = None, transforms: bool = True,
            passes: int = PROFILE_PASSES, extra_passes: int = EXTRA_PASSES) -> tuple[CampaignResult, dict[str, list[Any]]]:
    """Run (or continue) a campaign on this machine; returns its result and the models' layers."""
    from rooftune.platform import current_platform
    from rooftune.store import open_store

    models, precisions, primitives, batches, threads = _checked(models, sample, batches, threads, primitives,
                                                                precisions, passes, extra_passes)
    threads = list(threads or [current_platform().usable_cores])
    check_campaign(threads, budget_s)
    specs, layers = collect_specs(models, sample, batches, seed, precisions)
    own = store is None
    store = open_store(store or db)
    try:
        result = run_campaign(specs, store=store, primitives=primitives, threads=threads, budget_s=budget_s,
                              progress=progress, transforms=transforms, passes=passes,
                              extra_passes=extra_passes)
    finally:
        if own:
            store.close()
    return result, layers


def profile_fleet(cluster: str, models: Sequence[str] = (), *, sample: int = 0, batches: Sequence[int] = (1,),
                  threads: Sequence[int] | None = None, primitives: Sequence[str] | None = None,
                  precisions: Sequence[str] = ("fp32",), budget_s: float = 3600.0, seed: int = 0,
                  db: str | None = None, progress: Any = None, transforms: bool = True,
                  passes: int = PROFILE_PASSES, extra_passes: int = EXTRA_PASSES) -> tuple[FleetCampaign, dict[str, list[Any]]]:
    """Run (or continue) a campaign on every platform of a Ray cluster's nodes (``cluster``: the
    head's address), into the store every node shares (:mod:`rooftune.profiling.cluster`); returns
    the results per platform and the models' layers. Thread counts are checked on each node
    against its own cores (default: all of them)."""
    from rooftune.fleet import RayExecutor, check_address, shared_store

    check_address(cluster)
    models, precisions, primitives, batches, threads = _checked(models, sample, batches, threads, primitives,
                                                                precisions, passes, extra_passes)
    for t in threads or ():
        if t < 1:
            raise InvalidArgument("threads", t, "allowed integers >= 1 (each node checks them against its cores)")
    if isinstance(budget_s, bool) or not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise InvalidArgument("budget", budget_s, "allowed a positive number of seconds")
    executor = RayExecutor(cluster)  # an unreachable cluster is named before anything is written
    try:
        url = shared_store(executor, db)
        specs, layers = collect_specs(models, sample, batches, seed, precisions)
        result = run_on_fleet(executor, specs, db=url, threads=threads, primitives=primitives, budget_s=budget_s,
                              passes=passes, extra_passes=extra_passes, transforms=transforms, progress=progress,
                              name=",".join([*models, *([f"sample {sample}"] if sample else [])]))
    finally:
        executor.close()
    return result, layers


def _checked(models: Sequence[str], sample: int, batches: Sequence[int], threads: Sequence[int] | None,
             primitives: Sequence[str] | None, precisions: Sequence[str], passes: int,
             extra_passes: int) -> tuple[Any, Any, Any, Any, Any]:
    """A campaign's arguments as lists, or the one-line error of the first that is not allowed."""
    models = as_names(models, "models") or ()
    precisions = as_names(precisions, "precisions") or ()
    primitives = as_names(primitives, "primitives")
    batches = as_ints(batches, "batches") or ()
    threads = as_ints(threads, "threads")
    if not models and not sample:
        raise InvalidArgument("campaign", "empty", "give --models and/or --sample N")
    check_passes(passes)
    check_passes(extra_passes, "extra passes", low=0)
    for p in precisions:
        if p not in ("fp32", "int8"):
            raise InvalidArgument("precision", p, "allowed fp32, int8")
    if primitives:
        from rooftune.primitives import PRIMITIVES
        from rooftune.profiling.work import load_test_primitives

        load_test_primitives()  # (a test's primitives are known by name here too)
        for name in primitives:
            if name not in PRIMITIVES:
                raise InvalidArgument("primitive", name, f"allowed {', '.join(PRIMITIVES)}")
    return models, precisions, primitives, batches, threads


def run_isa_variant(variant: str, argv: Sequence[str]) -> int:
    """Run ``rooftune profile ARGV`` in a subprocess with the variant's ISA caps: it fingerprints as
    a platform of its own (the caps are part of the platform id)."""
    if variant not in ISA_VARIANTS:
        raise InvalidArgument("--isa-variant", variant, f"allowed {', '.join(ISA_VARIANTS)}")
    from rooftune.platform.processes import python_command, run

    env = {**os.environ, **ISA_VARIANTS[variant]}
    # Its output goes to the terminal as it runs; on Ctrl-C or SIGTERM it is interrupted as a
    # command of its own is, and stores what it measured, before its group is killed.
    done = run(python_command("rooftune", "profile", *argv), env=env, stdout=None, stderr=None,
               interrupt_grace_s=INTERRUPT_GRACE_S)
    return done.returncode
