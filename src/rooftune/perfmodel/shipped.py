"""The base models shipped with the package, and which of them is nearest a given machine."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from typing import Any

from rooftune.errors import InvalidArgument
from rooftune.perfmodel.persist import SUFFIX as SUFFIX
from rooftune.perfmodel.persist import load_model, read_header

#: Models shipped inside the package, each trained on data profiled on one kind of machine (its
#: provenance names the CPU, its ISA and the platforms): an AMD EPYC (Zen 5), an Intel Xeon with
#: AVX-512 and AMX (Emerald Rapids) and an AMD EPYC (Zen 4). :func:`load_base_model` takes the one
#: nearest the machine it runs on. Model files (:data:`SUFFIX`) are data: loading one runs no code from it.
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
