"""Learned performance models of convolution primitives: features, regressors of log(time) per
primitive, classifiers of the fastest method, evaluation split by network, transfer learning to a
new platform, and a base model shipped with the package.

    data = load_profile_data(store)                      # profiled rows of this machine
    model = data.fit(PerfModel("gbr"))                   # seconds per (spec, primitive)
    evaluate(data)                                       # leave-one-network-out figures
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from typing import Any

import numpy as np

from rooftune.errors import InvalidArgument, as_names, is_int
from rooftune.perfmodel.classifiers import (
    BASELINES,
    CLASSIFIERS,
    MethodClassifier,
    acl_rules,
    framework_default,
)
from rooftune.perfmodel.data import ProfileData, load_profile_data, rows_to_data
from rooftune.perfmodel.evaluate import evaluate, regression_metrics
from rooftune.perfmodel.features import FEATURE_SCHEMA_VERSION, FEATURES, featurize
from rooftune.perfmodel.persist import SUFFIX, convert_pickle, load_model, read_header, save_model
from rooftune.perfmodel.regressors import ESTIMATORS, PerfModel
from rooftune.perfmodel.transfer import (
    ADAPT_METHODS,
    METHODS,
    SAMPLERS,
    TransferEnsemble,
    TransferModel,
    check_base,
    choose_samples,
    fit_transfer,
    learning_curve,
    sample_weights,
)

#: Models shipped inside the package, each trained on data profiled on one kind of machine (its
#: provenance says which): an AMD EPYC (Zen 5), an Intel Xeon with AVX-512 and AMX (Emerald
#: Rapids) and an AMD EPYC (Zen 4), all 2-core VMs. :func:`load_base_model` takes the one nearest
#: the machine it runs on. Model files (:data:`SUFFIX`) are data: loading one runs no code from it.
BASE_MODELS = ("base_model.rtmodel", "base_model_xeon.rtmodel", "base_model_zen4.rtmodel")
BASE_MODEL = BASE_MODELS[0]

#: The vector extensions that decide which kernels a primitive runs (a base model from a machine
#: with the same ones ranks primitives alike), as the fingerprint names them.
_VECTOR_ISA = ("avx512f", "avx512_bf16", "avx512_vnni", "amx", "avx2", "fma", "avx_vnni", "sve", "sve2", "neon",
               "i8mm")


def _vendor(provenance: Mapping[str, Any]) -> str:
    v = str(provenance.get("vendor") or "")
    if v:
        return v
    name = str(provenance.get("cpu_model") or "").lower()  # models saved before the vendor was recorded
    return "AuthenticAMD" if "amd" in name else "GenuineIntel" if "intel" in name else ""


def base_closeness(provenance: Mapping[str, Any], platform: Any) -> tuple[int, int, int, int]:
    """How near a base model's training machine is to ``platform`` (a Platform, or a stored
    fingerprint as a mapping), compared as a tuple: the same vendor; the same microarchitecture
    (when both are known); the vector extensions both have less those only one has (0 when
    either side's ISA is unknown); the same number of usable cores."""
    def get(key: str) -> Any:
        return platform.get(key) if isinstance(platform, Mapping) else getattr(platform, key, None)

    here_vendor = str(get("vendor") or "")
    vendor = int(bool(here_vendor) and _vendor(provenance) == here_vendor)
    uarch = provenance.get("microarchitecture") or ""
    same_uarch = int(bool(uarch) and uarch == (get("microarchitecture") or ""))
    isa, here = set(provenance.get("isa") or ()), set(get("effective_isa") or get("isa") or ())
    shared = sum(1 if (x in here) == (x in isa) else -1 for x in _VECTOR_ISA if x in here or x in isa) \
        if isa and here else 0
    cores = int(get("usable_cores") is not None and provenance.get("usable_cores") == get("usable_cores"))
    return vendor, same_uarch, shared, cores


def base_model_paths() -> list[Any]:
    """The shipped base models that are installed."""
    root = resources.files("rooftune.perfmodel")
    return [root.joinpath(name) for name in BASE_MODELS if root.joinpath(name).is_file()]


@functools.cache
def _shipped_provenances() -> list[dict[str, Any]]:
    """Each installed shipped model's provenance, read once per process."""
    out = []
    for path in base_model_paths():
        with resources.as_file(path) as p:
            out.append(read_header(p).get("provenance") or {})
    return out


def _nearest_first(platform: Any = None, exclude_platform: str | None = None) -> list[int]:
    """Indices into :func:`base_model_paths` of the shipped models not trained on
    ``exclude_platform``, nearest ``platform`` (default: this machine) first by
    :func:`base_closeness`, the order of :data:`BASE_MODELS` on a tie."""
    paths = base_model_paths()
    headers = _shipped_provenances()
    keep = [i for i, h in enumerate(headers) if exclude_platform is None or exclude_platform not in (h.get("platforms") or [])]
    if not keep:
        if paths:
            raise InvalidArgument("base model", "shipped", f"every shipped base model was trained on platform {exclude_platform}",
                                  "pass one trained elsewhere with --base FILE")
        raise InvalidArgument("base model", BASE_MODEL, "is not installed with this rooftune",
                              "train one with `rooftune train --save FILE` and pass --model FILE")
    if len(keep) == 1:
        return keep
    if platform is None:
        from rooftune.platform import current_platform

        platform = current_platform()
    return sorted(keep, key=lambda i: (base_closeness(headers[i], platform), -i), reverse=True)


def base_model_path(platform: Any = None, exclude_platform: str | None = None) -> Any:
    """The shipped base model nearest ``platform`` (default: this machine), by
    :func:`base_closeness`; the first of :data:`BASE_MODELS` on a tie. ``exclude_platform``: leave
    out the models trained on that platform's data (a transfer measured on a platform must not
    start from a model that has seen it)."""
    return base_model_paths()[_nearest_first(platform, exclude_platform)[0]]


def load_base_model(platform: Any = None, exclude_platform: str | None = None) -> Any:
    """The shipped base model nearest ``platform`` (default: this machine); see :func:`base_model_path`."""
    with resources.as_file(base_model_path(platform, exclude_platform)) as p:
        return load_model(p)


def load_base_models(platform: Any = None, exclude_platform: str | None = None) -> list[Any]:
    """Every shipped base model not trained on ``exclude_platform``, the nearest ``platform`` first
    (the bases of an ``ensemble`` transfer)."""
    paths = base_model_paths()
    out = []
    for i in _nearest_first(platform, exclude_platform):
        with resources.as_file(paths[i]) as p:
            out.append(load_model(p))
    return out


def describe_base(model: Any) -> str:
    """Where a base model's data came from, in a few words (for several: each, nearest first)."""
    if isinstance(model, (list, tuple)):
        return "; ".join(describe_base(m) for m in model)
    prov = getattr(model, "provenance_", {}) or {}
    uarch = f" ({prov['microarchitecture']})" if prov.get("microarchitecture") else ""
    kind = getattr(model, "estimator", None)
    kind = f", {kind} ({getattr(model, 'target_', 'time')})" if kind else ""
    return (f"{prov.get('cpu_model') or 'unknown CPU'}{uarch}, {prov.get('usable_cores') or '?'} cores, "
            f"{prov.get('specs', '?')} specs of {len(prov.get('networks') or [])} networks{kind}")


__all__ = [
    "ADAPT_METHODS", "BASELINES", "BASE_MODEL", "BASE_MODELS", "CLASSIFIERS", "ESTIMATORS", "FEATURES", "FEATURE_SCHEMA_VERSION", "METHODS",
    "SAMPLERS", "SUFFIX", "MethodClassifier", "PerfModel", "ProfileData", "TransferEnsemble", "TransferModel", "acl_rules", "base_closeness", "base_model_path", "base_model_paths", "describe_base",
    "check_base", "choose_samples", "convert_pickle", "evaluate", "featurize", "fit_transfer", "framework_default", "learning_curve", "load_base_model",
    "load_base_models",
    "load_model", "load_profile_data", "read_header", "regression_metrics", "rows_to_data", "sample_weights", "save_model",
    "default_model", "train", "transfer", "transferred_model_path",
]


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
    (the shipped ones), ``finetune`` for one and ``residual`` for trees: with 50 samples
    fine-tuning was the closer of the last two on every platform pair measured, and the ensemble
    of the shipped bases closer than the nearest one fine-tuned alone (BENCHMARKS.md)."""
    from rooftune.perfmodel.persist import save_model as _save
    from rooftune.platform import current_platform
    from rooftune.profiling import collect_specs, run_campaign
    from rooftune.store import Store

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
    store = store if store is not None else Store(db)
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
    _save(model, path)
    return model, {"platform_id": platform.id, "samples": len(sub), "sampler": sampler, "method": method,
                   "base": describe_base(bases if method == "ensemble" else bases[0]), "campaign": campaign.to_dict(), "saved": str(path)}


def train(data: ProfileData, estimator: str = "mlp", save: Any = None, target: str = "auto") -> Any:
    """Fit a PerfModel on all of ``data`` (and save it when ``save`` is a path)."""
    model = data.fit(PerfModel(estimator, target=target))
    if save is not None:
        save_model(model, save)
    return model
