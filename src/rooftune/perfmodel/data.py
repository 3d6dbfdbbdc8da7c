"""Profiled rows as a learning problem: one row per spec, one column per primitive, times in
seconds (NaN where the primitive does not apply, failed, or was not profiled), with the networks
each spec comes from (for splitting by network) and the layout transforms' times."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rooftune.errors import InvalidArgument
from rooftune.primitives.spec import ConvSpec

#: A row is steady when its second-fastest pass lies within this factor of its stored time.
STEADY = 1.10


@dataclass
class ProfileData:
    platform_id: str
    threads: int
    specs: list[ConvSpec]
    primitives: list[str]
    times: np.ndarray  # (n_specs, n_primitives) seconds, NaN where unknown
    sources: list[list[str]]
    transforms: dict[str, dict[str, float]] = field(default_factory=dict)  # spec_key -> transform -> seconds
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: Per (spec, primitive): the row's second-fastest pass over its fastest (the stored time);
    #: NaN where fewer than two passes were kept. How far the data agrees with itself.
    spread: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def keys(self) -> list[str]:
        return [s.key() for s in self.specs]

    @property
    def networks(self) -> list[str]:
        return sorted({src for srcs in self.sources for src in srcs if src != "sampled"})

    def subset(self, idx: Sequence[int] | np.ndarray) -> ProfileData:
        idx = list(int(i) for i in idx)
        return ProfileData(self.platform_id, self.threads, [self.specs[i] for i in idx], list(self.primitives),
                           self.times[idx], [self.sources[i] for i in idx], self.transforms, self.fingerprint,
                           None if self.spread is None else self.spread[idx])

    def repeatability(self) -> dict[str, Any]:
        """Of the timed rows with two passes or more, the share whose second-fastest pass lies
        within 5 % and within :data:`STEADY` (10 %) of the stored (fastest) one. A row that
        disagrees with itself by more than 10 % is predicted within 10 % only by chance."""
        if self.spread is None:
            return {"rows": 0}
        known = self.spread[~np.isnan(self.spread)]
        if not len(known):
            return {"rows": 0}
        return {"rows": int(len(known)), "within_5pct": float(np.mean(known <= 1.05)),
                "within_10pct": float(np.mean(known <= STEADY))}

    def of_network(self, network: str) -> np.ndarray:
        return np.asarray([i for i, s in enumerate(self.sources) if network in s], dtype=int)

    def split_by_network(self, held_out: Sequence[str]) -> tuple[ProfileData, ProfileData]:
        """Train on every spec that none of ``held_out`` uses; test on the held-out networks' specs."""
        test = [i for i, s in enumerate(self.sources) if set(s) & set(held_out)]
        train = [i for i in range(len(self)) if i not in set(test)]
        return self.subset(train), self.subset(test)

    def conversions(self) -> list[tuple[ConvSpec, float]]:
        """(spec, seconds to convert its input between NCHW and NHWC: the mean of both directions)."""
        out = []
        for spec in self.specs:
            t = self.transforms.get(spec.key(), {})
            both = [t[n] for n in ("nchw-to-nhwc", "nhwc-to-nchw") if n in t]
            if both:
                out.append((spec, sum(both) / len(both)))
        return out

    def fit(self, model: Any) -> Any:
        """Fit ``model`` (a PerfModel) on this data, with its conversions and provenance."""
        from rooftune.perfmodel.features import cache_sizes

        return model.fit(self.specs, self.times, self.primitives, caches=cache_sizes(self.fingerprint),
                         provenance=self.provenance(), conversions=self.conversions())

    def provenance(self) -> dict[str, Any]:
        import time

        return {"platforms": [self.platform_id], "cpu_model": self.fingerprint.get("cpu_model", ""),
                "vendor": self.fingerprint.get("vendor", ""),
                "microarchitecture": self.fingerprint.get("microarchitecture", ""),
                "isa": list(self.fingerprint.get("effective_isa") or self.fingerprint.get("isa") or []),
                "usable_cores": self.fingerprint.get("usable_cores"),
                "trained_at": time.strftime("%Y-%m-%d", time.gmtime()),
                "threads": self.threads, "specs": len(self), "rows": int(np.sum(~np.isnan(self.times))),
                "networks": self.networks}

    def best(self) -> tuple[np.ndarray, np.ndarray]:
        """Index and time of the fastest profiled primitive per spec (-1 / NaN where none)."""
        t = np.where(np.isnan(self.times), np.inf, self.times)
        idx = np.argmin(t, axis=1)
        ok = np.isfinite(t[np.arange(len(t)), idx]) if len(t) else np.zeros(0, bool)
        return np.where(ok, idx, -1), np.where(ok, t[np.arange(len(t)), idx] if len(t) else t, np.nan)


def load_profile_data(store: Any, platform_id: str | None = None, threads: int | None = None,
                      dtype: str | None = None, primitives: Sequence[str] | None = None) -> ProfileData:
    """The profiled rows of one platform (default: this machine) at one thread count (default: the
    most profiled) as a :class:`ProfileData`. Raises with what to profile when there are none."""
    from rooftune.platform import current_platform

    pid = platform_id or current_platform().id
    rows = store.profiles(pid)
    if not rows:
        known = sorted(store.profiled_platforms())
        raise InvalidArgument("platform", pid, "has no profiled convolutions" + (
            f" (platforms with data: {', '.join(known)})" if known else ""),
            "run `rooftune profile --models resnet50,mobilenet_v2 --sample 200` on it, or `rooftune data import FILE`")
    counts: dict[int, int] = {}
    for r in rows:
        counts[int(r["threads"])] = counts.get(int(r["threads"]), 0) + 1
    if threads is None:
        threads = max(counts, key=lambda t: (counts[t], t))
    elif threads not in counts:
        raise InvalidArgument("threads", threads, f"profiled on this platform: {', '.join(map(str, sorted(counts)))}")
    return rows_to_data(rows, pid, threads, dtype, primitives, store.fingerprints().get(pid, {}))


def rows_to_data(rows: Sequence[Mapping[str, Any]], platform_id: str, threads: int, dtype: str | None = None,
                 primitives: Sequence[str] | None = None, fingerprint: Mapping[str, Any] | None = None) -> ProfileData:
    specs: dict[str, ConvSpec] = {}
    sources: dict[str, list[str]] = {}
    times: dict[tuple[str, str], float] = {}
    spreads: dict[tuple[str, str], float] = {}
    transforms: dict[str, dict[str, float]] = {}
    names: list[str] = []
    for r in rows:
        if int(r["threads"]) != threads:
            continue
        spec = ConvSpec.from_dict(r["spec"])
        if dtype and spec.dtype != dtype:
            continue
        k = r["spec_key"]
        name = r["primitive"]
        if name.startswith("transform:"):
            if r["status"] == "ok" and r.get("median_s"):
                transforms.setdefault(k, {})[name.split(":", 1)[1]] = float(r["median_s"])
            continue
        if primitives and name not in primitives:
            continue
        specs.setdefault(k, spec)
        srcs = sources.setdefault(k, [])
        srcs.extend(s for s in (r.get("sources") or []) if s not in srcs)
        if name not in names:
            names.append(name)
        m = r.get("median_s")
        if r["status"] == "ok" and m is not None and math.isfinite(m) and m > 0:
            times[(k, name)] = float(m)
            passes = sorted(float(v) for v in (r.get("pass_medians") or []) if v and math.isfinite(v) and v > 0)
            if len(passes) >= 2:
                spreads[(k, name)] = passes[1] / passes[0]
    keys = list(specs)
    arr = np.full((len(keys), len(names)), np.nan)
    spread = np.full((len(keys), len(names)), np.nan)
    for i, k in enumerate(keys):
        for j, n in enumerate(names):
            if (k, n) in times:
                arr[i, j] = times[(k, n)]
            if (k, n) in spreads:
                spread[i, j] = spreads[(k, n)]
    return ProfileData(platform_id, threads, [specs[k] for k in keys], names, arr, [sources[k] for k in keys],
                       transforms, dict(fingerprint or {}), spread)
