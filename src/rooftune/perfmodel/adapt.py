"""Adapting a model to this machine and training one: where `rooftune transfer` keeps the model
it adapts, which model `rooftune select` uses, and the transfer and training entry points."""

from __future__ import annotations

from typing import Any

import numpy as np

from rooftune.errors import InvalidArgument, as_names, is_int
from rooftune.perfmodel.data import ProfileData, load_profile_data
from rooftune.perfmodel.persist import SUFFIX, load_model, save_model
from rooftune.perfmodel.regressors import PerfModel
from rooftune.perfmodel.shipped import describe_base, load_base_model
from rooftune.perfmodel.transfer import (
    ADAPT_METHODS,
    check_base,
    choose_samples,
    fit_transfer,
    sample_weights,
)


def transferred_model_path(platform_id: str) -> Any:
    """Where `rooftune transfer` keeps the model adapted to a platform (next to the default store)."""
    from rooftune.store import default_db_path

    return default_db_path().parent / f"perfmodel-{platform_id}{SUFFIX}"


def default_model(platform_id: str | None = None) -> tuple[Any, str]:
    """The model `rooftune select` uses: the one transferred to this platform if there is one,
    else the shipped base model; and where it came from. One an earlier release transferred and
    pickled is refused, with how to convert it, rather than passed over for the base model."""
    from rooftune.platform import current_platform

    path = transferred_model_path(platform_id or current_platform().id)
    if path.is_file():
        return load_model(path), str(path)
    legacy = path.with_suffix(".pkl")  # where earlier releases kept it
    if legacy.is_file():  # a pickle is refused, the error saying how to convert it to ``path``
        return load_model(legacy), str(legacy)
    base = load_base_model()
    return base, f"shipped base model nearest this machine: {describe_base(base)}"



def default_method(base: Any) -> str:
    """How `rooftune transfer` adapts ``base`` (one model, or several nearest first) unless told:
    several mlp bases are fine-tuned, shifted and mixed (an ensemble), one is fine-tuned; trees get residual boosting."""
    bases = list(base) if isinstance(base, (list, tuple)) else [base]
    if all(getattr(b, "estimator", None) == "mlp" for b in bases):
        return "ensemble" if len(bases) > 1 else "finetune"
    return "residual"


def transfer(base: Any, *, samples: int = 50, sampler: str = "cluster", method: str | None = None,
             models: Any = ("resnet50", "mobilenet_v2"), pool: int = 200, threads: int | None = None,
             seed: int = 0, db: str | None = None, store: Any = None, save: Any = None,
             progress: Any = None) -> tuple[Any, dict[str, Any]]:
    """Adapt ``base`` (a model, or several with the nearest first) to this machine: choose
    ``samples`` specs from a pool (the convolutions of ``models`` and ``pool`` sampled specs),
    profile them (rows already stored are reused), fit the transfer model on them, each weighed by
    how many of the pool's specs it stands for (:func:`sample_weights`), and save it where
    `rooftune select` finds it. ``method`` defaults to ``ensemble`` for several mlp bases
    (the shipped ones), ``finetune`` for one and ``residual`` for trees: a default chosen on the
    shipped platforms' data; ``benchmarks/perfmodel_eval.py`` compares the methods (BENCHMARKS.md)."""
    from rooftune.platform import current_platform
    from rooftune.profiling import collect_specs, run_campaign
    from rooftune.store import open_store

    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 5:
        raise InvalidArgument("samples", samples, "allowed an integer >= 5")
    method = method or default_method(base)
    if method not in ADAPT_METHODS:
        raise InvalidArgument("--method", method, f"allowed {', '.join(ADAPT_METHODS)}")
    bases = list(base) if isinstance(base, (list, tuple)) else [base]
    if method != "scratch":  # before anything is profiled
        for b in bases if method == "ensemble" else bases[:1]:
            check_base(b, method)
    platform = current_platform()
    if threads is not None and (not is_int(threads) or not 1 <= threads <= platform.usable_cores):
        raise InvalidArgument("threads", threads, f"allowed 1..{platform.usable_cores} (the usable cores of this "
                              "machine), or None for all of them")
    threads = int(threads or platform.usable_cores)
    models = as_names(models, "models") or ()
    specs, _layers = collect_specs(list(models), pool, [1], seed)
    if samples > len(specs):
        held = (f"the distinct convolutions of {', '.join(models)} and " if models else "") + f"{pool} sampled ones"
        allowed = f"allowed 5..{len(specs)}" if len(specs) >= 5 else "the pool is too small; add --models"
        raise InvalidArgument("samples", samples, f"{allowed}: the candidate pool holds {len(specs)} specs ({held})")
    idx = choose_samples([s for s, _ in specs], samples, sampler, seed)
    chosen = [specs[i] for i in idx]
    weight = dict(zip((s.key() for s, _ in chosen), sample_weights([s for s, _ in specs], idx), strict=True))
    own = store is None
    store = open_store(store or db)
    try:
        campaign = run_campaign(chosen, store=store, threads=[threads], progress=progress)
        data = load_profile_data(store, platform.id, threads)
    finally:
        if own:
            store.close()
    keys = {s.key() for s, _ in chosen}
    sub = data.subset([i for i, s in enumerate(data.specs) if s.key() in keys])
    model = fit_transfer(bases if method == "ensemble" else bases[:1], method, sub.specs, sub.times, sub.primitives,
                         random_state=seed, provenance={**sub.provenance(), "sampler": sampler},
                         conversions=sub.conversions(), threads=sub.threads,
                         weights=np.asarray([weight[s.key()] for s in sub.specs]))
    path = save if save is not None else transferred_model_path(platform.id)
    save_model(model, path)
    return model, {"platform_id": platform.id, "samples": len(sub), "sampler": sampler, "method": method,
                   "base": describe_base(bases if method == "ensemble" else bases[0]), "campaign": campaign.to_dict(), "saved": str(path)}


def train(data: ProfileData, estimator: str = "mlp", save: Any = None, target: str = "auto") -> Any:
    """Fit a PerfModel on all of ``data`` (and save it when ``save`` is a path)."""
    model = data.fit(PerfModel(estimator, target=target))
    if save is not None:
        save_model(model, save)
    return model
