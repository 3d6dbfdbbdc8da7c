"""Profiled rows as a learning problem: one row per spec, one column per primitive, times in
seconds (NaN where the primitive does not apply, failed, or was not profiled), with the networks
each spec comes from (for splitting by network) and the layout transforms' times.

Times are brought to the quiet machine. A campaign on a busy host keeps each row's fastest pass,
but on such a host even that pass runs while the machine-speed probe (:mod:`rooftune.bench.canary`)
reads slow (BENCHMARKS.md, perfmodel Run 12, compares quiet and busy campaigns). A row's time is
divided by ``(probe / fastest probe) **``
:data:`PROBE_ELASTICITY`, the probe read at the pass whose time the row keeps, so that networks
profiled in busy hours and in quiet ones are on one scale. The factor differs per kernel (a
reading cannot stand for every kernel's slowdown), so the exponent is the one that predicted
quiet-measured held-out rows best; rows without probe readings are kept as measured."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rooftune.errors import InvalidArgument
from rooftune.perfmodel.metrics import regression_metrics
from rooftune.primitives.spec import ConvSpec

#: A row is steady when its second-fastest pass lies within this factor of its stored time.
STEADY = 1.10
#: A profiled time is divided by (probe reading / the platform's fastest) to this power: the
#: exponent that best predicted quiet-measured held-out networks from a store with busy-hour rows
#: among them. Fitted on one store; docs/benchmarks/history.md gives the check.
PROBE_ELASTICITY = 0.5
#: The platform's fastest probe reading is taken as this percentile of all its rows' readings
#: (the least one could be a lucky outlier).
PROBE_REFERENCE_PERCENTILE = 1.0


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
    #: Per (spec, primitive): what the stored time was divided by to bring it to the quiet
    #: machine (1 where the row has no probe reading). See the module's docstring.
    probe_factor: np.ndarray | None = None
    #: The exponent those factors were computed with (0: the times as stored, as in data built
    #: without a store's probe readings).
    probe_exponent: float = 0.0

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
                           None if self.spread is None else self.spread[idx],
                           None if self.probe_factor is None else self.probe_factor[idx], self.probe_exponent)

    def probe_scaling(self) -> dict[str, Any]:
        """How far the times were brought to the quiet machine: the rows scaled (factor above
        1.001), the median and 90th percentile of their factors, of the known rows."""
        known = ~np.isnan(self.times)
        f = self.probe_factor[known] if self.probe_factor is not None else np.ones(int(known.sum()))
        scaled = f[f > 1.001]
        return {"rows": int(known.sum()), "scaled": int(len(scaled)), "exponent": self.probe_exponent,
                "median": float(np.median(scaled)) if len(scaled) else 1.0,
                "p90": float(np.percentile(scaled, 90)) if len(scaled) else 1.0}

    def repeatability(self) -> dict[str, Any]:
        """Of the timed rows with two passes or more, the share whose second-fastest pass lies
        within 5 % and within :data:`STEADY` (10 %) of the stored (fastest) one. A row that
        disagrees with itself by more than 10 % is predicted within 10 % only by chance. Per spec,
        the share where the primitives' second-fastest passes name the same fastest primitive as
        their stored times (``same_fastest`` of ``fastest_specs``): a model that predicted the
        stored times exactly would score that top-1 against a second look at the same campaign."""
        if self.spread is None:
            return {"rows": 0}
        known = self.spread[~np.isnan(self.spread)]
        if not len(known):
            return {"rows": 0}
        out: dict[str, Any] = {"rows": int(len(known)), "within_5pct": float(np.mean(known <= 1.05)),
                               "within_10pct": float(np.mean(known <= STEADY))}
        # per spec with two primitives or more of two passes: the top-1 of the second-fastest
        # passes (as a prediction) against the stored times
        both = ~np.isnan(self.times) & ~np.isnan(self.spread)
        rows = both.sum(axis=1) >= 2
        if rows.any():
            stored = np.where(both, self.times, np.nan)[rows]
            m = regression_metrics(stored * self.spread[rows], stored)
            out.update(fastest_specs=m["specs"], same_fastest=m["top1"])
        return out

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
                         provenance=self.provenance(), conversions=self.conversions(), threads=self.threads)

    def provenance(self) -> dict[str, Any]:
        import time

        return {"platforms": [self.platform_id], "cpu_model": self.fingerprint.get("cpu_model", ""),
                "vendor": self.fingerprint.get("vendor", ""),
                "microarchitecture": self.fingerprint.get("microarchitecture", ""),
                "isa": list(self.fingerprint.get("effective_isa") or self.fingerprint.get("isa") or []),
                "usable_cores": self.fingerprint.get("usable_cores"),
                "trained_at": time.strftime("%Y-%m-%d", time.gmtime()),
                "threads": self.threads, "specs": len(self), "rows": int(np.sum(~np.isnan(self.times))),
                "networks": self.networks, "probe_scaling": self.probe_scaling()}

    def best(self) -> tuple[np.ndarray, np.ndarray]:
        """Index and time of the fastest profiled primitive per spec (-1 / NaN where none)."""
        t = np.where(np.isnan(self.times), np.inf, self.times)
        idx = np.argmin(t, axis=1)
        ok = np.isfinite(t[np.arange(len(t)), idx]) if len(t) else np.zeros(0, bool)
        return np.where(ok, idx, -1), np.where(ok, t[np.arange(len(t)), idx] if len(t) else t, np.nan)


def load_profile_data(store: Any, platform_id: str | None = None, threads: int | None = None,
                      dtype: str | None = None, primitives: Sequence[str] | None = None,
                      probe_exponent: float | None = None) -> ProfileData:
    """The profiled rows of one platform (default: this machine) at one thread count (default: the
    most profiled) as a :class:`ProfileData`, times brought to the quiet machine (``probe_exponent``:
    see :func:`rows_to_data`). Raises with what to profile when there are none."""
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
    return rows_to_data(rows, pid, threads, dtype, primitives, store.fingerprints().get(pid, {}), probe_exponent)


def probe_reference(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The platform's fastest probe reading (:data:`PROBE_REFERENCE_PERCENTILE` of every reading
    its rows carry), or None when none carries one."""
    readings = [float(v) for r in rows for v in (r.get("pass_canary") or []) if v]
    return float(np.percentile(readings, PROBE_REFERENCE_PERCENTILE)) if readings else None


def probe_factor(row: Mapping[str, Any], reference: float | None, exponent: float = PROBE_ELASTICITY) -> float:
    """What a row's stored time is divided by to bring it to the quiet machine: the probe read at
    its fastest pass over ``reference``, to the power ``exponent``; 1 without readings."""
    medians, readings = row.get("pass_medians") or [], row.get("pass_canary") or []
    if not reference or not medians or len(readings) != len(medians):
        return 1.0
    fastest = min(range(len(medians)), key=lambda i: medians[i] if medians[i] else math.inf)
    reading = readings[fastest]
    if not reading or not medians[fastest]:
        return 1.0
    return max(float(reading) / reference, 1.0) ** exponent


def rows_to_data(rows: Sequence[Mapping[str, Any]], platform_id: str, threads: int, dtype: str | None = None,
                 primitives: Sequence[str] | None = None, fingerprint: Mapping[str, Any] | None = None,
                 probe_exponent: float | None = None) -> ProfileData:
    """Times brought to the quiet machine with ``probe_exponent`` (default
    :data:`PROBE_ELASTICITY`; 0 keeps them as stored): the module's docstring."""
    specs: dict[str, ConvSpec] = {}
    sources: dict[str, list[str]] = {}
    times: dict[tuple[str, str], float] = {}
    spreads: dict[tuple[str, str], float] = {}
    factors: dict[tuple[str, str], float] = {}
    transforms: dict[str, dict[str, float]] = {}
    names: list[str] = []
    exponent = PROBE_ELASTICITY if probe_exponent is None else float(probe_exponent)
    if not math.isfinite(exponent) or exponent < 0:
        raise InvalidArgument("probe_exponent", probe_exponent, "allowed a number >= 0 (0 keeps the times as stored)")
    # the probe runs at the campaign's thread count: its fastest reading is taken at this one
    reference = probe_reference([r for r in rows if int(r["threads"]) == threads]) if exponent else None
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
                transforms.setdefault(k, {})[name.split(":", 1)[1]] = float(r["median_s"]) / probe_factor(r, reference, exponent)
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
            factors[(k, name)] = probe_factor(r, reference, exponent)
            times[(k, name)] = float(m) / factors[(k, name)]
            passes = sorted(float(v) for v in (r.get("pass_medians") or []) if v and math.isfinite(v) and v > 0)
            if len(passes) >= 2:
                spreads[(k, name)] = passes[1] / passes[0]
    keys = list(specs)
    arr = np.full((len(keys), len(names)), np.nan)
    spread = np.full((len(keys), len(names)), np.nan)
    factor = np.ones((len(keys), len(names)))
    for i, k in enumerate(keys):
        for j, n in enumerate(names):
            if (k, n) in times:
                arr[i, j] = times[(k, n)]
                factor[i, j] = factors[(k, n)]
            if (k, n) in spreads:
                spread[i, j] = spreads[(k, n)]
    return ProfileData(platform_id, threads, [specs[k] for k in keys], names, arr, [sources[k] for k in keys],
                       transforms, dict(fingerprint or {}), spread, factor, exponent)
